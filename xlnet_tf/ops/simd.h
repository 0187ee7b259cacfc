// Vector helpers shared by the xlnet_tf kernels: 16-float rows with GCC/Clang vector extensions, and the dropout
// bits of xlnet_tf/kernels/dropout_mask.py's counter hash.
//
// Explicit vectors make the exponential, maxima, sums, hash and bfloat16 conversions vectorise on every target: the
// compiler splits a 16-lane vector into SSE, AVX2 or AVX-512 registers, whichever the function is compiled for
// (the row loops are compiled for all three with target_clones, chosen per CPU at load time). Reductions keep 16
// lane partials added in a fixed order, so results do not depend on how rows are split across threads.

#ifndef XLNET_TF_OPS_SIMD_H_
#define XLNET_TF_OPS_SIMD_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace xlnet_tf {
namespace simd {

// The row loops' targets; a build may pin one instead, e.g. -DXLNET_CLONES= (SSE only) to test that path.
#ifndef XLNET_CLONES
#define XLNET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#define XLNET_INLINE __attribute__((always_inline)) inline

typedef float VecF __attribute__((vector_size(64)));
typedef int32_t VecI __attribute__((vector_size(64)));
typedef uint32_t VecU __attribute__((vector_size(64)));
typedef uint16_t VecH __attribute__((vector_size(32)));
typedef int16_t VecS __attribute__((vector_size(32)));
typedef uint8_t VecB __attribute__((vector_size(16)));
constexpr int64_t kWidth = 16;

XLNET_INLINE int64_t Padded(int64_t k) { return (k + kWidth - 1) / kWidth * kWidth; }

XLNET_INLINE VecF Splat(float x) { return VecF{} + x; }
XLNET_INLINE VecF Select(VecI mask, VecF a, VecF b) { return (VecF)(((VecI)a & mask) | ((VecI)b & ~mask)); }

XLNET_INLINE VecF Load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
XLNET_INLINE VecF Load(const Eigen::bfloat16* p) {  // bfloat16 is the high half of a float32
  VecH h;
  std::memcpy(&h, p, sizeof(h));
  return (VecF)(__builtin_convertvector(h, VecU) << 16);
}
XLNET_INLINE void Store(float* p, VecF v) { std::memcpy(p, &v, sizeof(v)); }
XLNET_INLINE void Store(Eigen::bfloat16* p, VecF v) {  // round to nearest even, NaN stays a (quiet) NaN: as Eigen
  const VecU u = (VecU)v;
  const VecU rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const VecU nan = (VecU)(v != v);
  const VecU quiet = ((u >> 16) & 0x8000u) | 0x7FC0u;
  const VecH h = __builtin_convertvector((nan & quiet) | (~nan & rounded), VecH);
  std::memcpy(p, &h, sizeof(h));
}
// The first n (< 16) elements, the other lanes 0 / not written.
template <typename T>
XLNET_INLINE VecF LoadPartial(const T* p, int64_t n) {
  T tmp[kWidth] = {};
  std::memcpy(tmp, p, n * sizeof(T));
  return Load(tmp);
}
template <typename T>
XLNET_INLINE void StorePartial(T* p, VecF v, int64_t n) {
  T tmp[kWidth];
  Store(tmp, v);
  std::memcpy(p, tmp, n * sizeof(T));
}
// Elements [0, k) of a row as padded float32 scratch: the tail lanes get `pad`.
template <typename T>
XLNET_INLINE void LoadRow(const T* src, int64_t k, float pad, float* dst) {
  const int64_t full = k - k % kWidth;
  for (int64_t j = 0; j < full; j += kWidth) Store(dst + j, Load(src + j));
  if (full < k) {
    const VecF v = LoadPartial(src + full, k - full);
    const VecI lane = VecI{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    Store(dst + full, Select(lane < static_cast<int32_t>(k - full), v, Splat(pad)));
  }
}
template <typename T>
XLNET_INLINE void StoreRow(const float* src, int64_t k, T* dst) {
  const int64_t full = k - k % kWidth;
  for (int64_t j = 0; j < full; j += kWidth) Store(dst + j, Load(src + j));
  if (full < k) StorePartial(dst + full, Load(src + full), k - full);
}
XLNET_INLINE VecF LoadFlags(const bool* p) {  // 16 bools as 0.0 / 1.0
  VecB b;
  std::memcpy(&b, p, sizeof(b));
  return __builtin_convertvector(b, VecF);
}
XLNET_INLINE float LaneMax(VecF v) {
  float m = v[0];
  for (int l = 1; l < kWidth; ++l) m = v[l] > m ? v[l] : m;
  return m;
}
XLNET_INLINE float LaneSum(VecF v) {
  float total = 0.0f;
  for (int l = 0; l < kWidth; ++l) total += v[l];
  return total;
}

// exp(x) for x <= 0 in float32: 2^n exp(r) with n = round(x log2 e) and r = x - n ln 2 (ln 2 in two parts), exp(r)
// by the Cephes polynomial (about 1 ulp). Below -87 (the smallest normal result) it is 0, as for the -1e30 masks
// and the -inf padding.
constexpr float kExpFloor = -87.0f;
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: x + magic - magic rounds x to an integer

XLNET_INLINE VecF ExpNonPositive(VecF x) {
  const VecI below = x < kExpFloor;
  const VecF xc = Select(below, Splat(kExpFloor), x);
  const VecF n = (xc * 1.44269504088896341f + kRoundMagic) - kRoundMagic;
  VecF r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  VecF poly = Splat(1.9875691500e-4f);
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = poly * (r * r) + r + 1.0f;
  const VecF two_n = (VecF)((__builtin_convertvector(n, VecI) + 127) << 23);
  return (VecF)((VecI)(poly * two_n) & ~below);
}

// dropout_mask.py's counter hash: MurmurHash3's finalizer, word i = F(F(F(i ^ k0) + k1) ^ k0).
XLNET_INLINE uint32_t Mix(uint32_t v) {
  v ^= v >> 16;
  v *= 0x85EBCA6Bu;
  v ^= v >> 13;
  v *= 0xC2B2AE35u;
  return v ^ (v >> 16);
}
XLNET_INLINE VecU Mix(VecU v) {
  v ^= v >> 16;
  v *= 0x85EBCA6Bu;
  v ^= v >> 13;
  v *= 0xC2B2AE35u;
  return v ^ (v >> 16);
}

struct Dropout {
  bool on = false;
  int16_t threshold = 0;
  float scale = 1.0f;
  uint32_t k0 = 0, k1 = 0;  // the hash keys of the call's seed
};

// The hash keys of dropout_mask.py's _hash for a call's seed (int32 [2]).
XLNET_INLINE void SetSeed(Dropout* d, int32_t s0, int32_t s1) {
  d->k0 = Mix(static_cast<uint32_t>(s0) + 0x9E3779B9u);
  d->k1 = Mix(static_cast<uint32_t>(s1) ^ d->k0);
}

// The dropout factors (0 or scale) of elements [e0, e0 + k) of the flattened scores, into padded `factor`;
// `words` is scratch for k / 2 + 2 * kWidth words.
XLNET_INLINE void DropoutFactors(const Dropout& d, int64_t e0, int64_t k, uint32_t* words, float* factor) {
  const uint32_t w0 = static_cast<uint32_t>(e0 >> 1);
  const int64_t count = ((e0 + k - 1) >> 1) - (e0 >> 1) + 1;
  const VecU lane = VecU{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  for (int64_t w = 0; w < count; w += kWidth) {
    const VecU i = lane + (w0 + static_cast<uint32_t>(w));
    const VecU word = Mix(Mix(Mix(i ^ d.k0) + d.k1) ^ d.k0);
    std::memcpy(words + w, &word, sizeof(word));
  }
  const int16_t* bits = reinterpret_cast<const int16_t*>(words) + (e0 & 1);  // little-endian: low half first
  for (int64_t j = 0; j < Padded(k); j += kWidth) {
    VecS b;
    std::memcpy(&b, bits + j, sizeof(b));
    const VecI keep = __builtin_convertvector(b, VecI) >= static_cast<int32_t>(d.threshold);
    Store(factor + j, Select(keep, Splat(d.scale), Splat(0.0f)));
  }
}

// Reads a kernel's dropout attributes (has_dropout, threshold: int16 range, scale) into d.
inline absl::Status ReadDropoutAttrs(::tensorflow::OpKernelConstruction* ctx, Dropout* d) {
  int64_t threshold = 0;
  TF_RETURN_IF_ERROR(ctx->GetAttr("has_dropout", &d->on));
  TF_RETURN_IF_ERROR(ctx->GetAttr("threshold", &threshold));
  TF_RETURN_IF_ERROR(ctx->GetAttr("scale", &d->scale));
  if (threshold < -32768 || threshold > 32767) return absl::InvalidArgumentError("threshold must fit in int16");
  d->threshold = static_cast<int16_t>(threshold);
  return absl::OkStatus();
}

// Checks a kernel's `seed` input (int32 [2]) for dropout over `data` and sets d's hash keys. The hash counts
// 32-bit words of two elements, so one call covers at most 2^32 elements.
inline absl::Status ReadDropoutSeed(const char* op, const ::tensorflow::Tensor& seed,
                                    const ::tensorflow::TensorShape& data, Dropout* d) {
  if (seed.dims() != 1 || seed.dim_size(0) != 2)
    return absl::InvalidArgumentError(absl::StrCat(op, ": seed must be [2], got ", seed.shape().DebugString()));
  if (data.num_elements() >= (int64_t{1} << 32))
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": at most 2^32 elements per call, got ", data.DebugString()));
  SetSeed(d, seed.flat<int32_t>()(0), seed.flat<int32_t>()(1));
  return absl::OkStatus();
}

XLNET_INLINE float ToFloat(float v) { return v; }
XLNET_INLINE float ToFloat(Eigen::bfloat16 v) { return static_cast<float>(v); }

}  // namespace simd
}  // namespace xlnet_tf

#endif  // XLNET_TF_OPS_SIMD_H_
