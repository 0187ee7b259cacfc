// XlnetResidualLayerNorm / XlnetResidualLayerNormGrad: LayerNorm(x + dropout(out + bias)) on [R, D] rows.
//
// The residual/LayerNorm step after every attention and feed-forward block of a training step, forward and
// backward, row by row in cache: one pass over memory each way, rows split across the intra-op threads. XLA's
// CPU kernels for the same chain make several passes, with single-threaded row and column reductions.
//
// Forward, per row (all in float32; out and x are float32 or bfloat16, y is x's dtype):
//   u = out + bias;  d = keep ? u * scale : 0   (keep = bits >= threshold; no dropout: d = u)
//   z = d + x;  mean = sum(z) / D;  var = sum((z - mean)^2) / D
//   inv = rsqrt(var + epsilon) * gamma;  y = z * inv + (beta - mean * inv)      (tf.nn.batch_normalization)
// Backward, with xhat = (z - mean) * rsqrt(var + epsilon) and g = dy * gamma:
//   dz = rsqrt(var + epsilon) * (g - mean(g) - xhat * mean(g * xhat));  d_x = dz;  d_out = keep ? dz * scale : 0
//   d_gamma = sum_rows(dy * xhat);  d_beta = sum_rows(dy);  d_bias = sum_rows(d_out)
// Column sums are accumulated per fixed block of rows and then added in block order: deterministic.

#define EIGEN_USE_THREADS

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "unsupported/Eigen/CXX11/Tensor"
#include "simd.h"

namespace xlnet_tf {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::shape_inference::InferenceContext;
using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_OP("XlnetResidualLayerNorm")
    .Input("out: T")
    .Input("x: T")
    .Input("bias: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Input("seed: int32")
    .Output("y: T")
    .Attr("T: {float, bfloat16}")
    .Attr("has_bias: bool")
    .Attr("has_dropout: bool")
    .Attr("threshold: int")
    .Attr("scale: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      return absl::OkStatus();
    })
    .Doc("LayerNorm(x + dropout(out + bias)) over the last axis of [R, D] rows, in float32.");

REGISTER_OP("XlnetResidualLayerNormGrad")
    .Input("dy: T")
    .Input("out: T")
    .Input("x: T")
    .Input("bias: float")
    .Input("gamma: float")
    .Input("seed: int32")
    .Output("d_out: T")
    .Output("d_x: T")
    .Output("d_bias: float")
    .Output("d_gamma: float")
    .Output("d_beta: float")
    .Attr("T: {float, bfloat16}")
    .Attr("has_bias: bool")
    .Attr("has_dropout: bool")
    .Attr("threshold: int")
    .Attr("scale: float")
    .Attr("epsilon: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(4));
      c->set_output(3, c->input(4));
      c->set_output(4, c->input(4));
      return absl::OkStatus();
    })
    .Doc("Gradient of XlnetResidualLayerNorm (recomputes the forward row by row).");

inline float ToFloat(float v) { return v; }
inline float ToFloat(Eigen::bfloat16 v) { return static_cast<float>(v); }
template <typename T>
inline T FromFloat(float v) { return static_cast<T>(v); }

struct Params {
  int64_t rows = 0, depth = 0;
  bool has_bias = false, has_dropout = false;
  int16_t threshold = 0;
  float scale = 1.0f, epsilon = 0.0f;
  simd::Dropout dropout;  // with the call's hash keys (CheckShapes)
};

// Reads attributes shared by both kernels.
void ReadAttrs(OpKernelConstruction* ctx, Params* p) {
  int64_t threshold = 0;
  OP_REQUIRES_OK(ctx, ctx->GetAttr("has_bias", &p->has_bias));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("has_dropout", &p->has_dropout));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("threshold", &threshold));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &p->scale));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &p->epsilon));
  OP_REQUIRES(ctx, threshold >= -32768 && threshold <= 32767,
              absl::InvalidArgumentError("threshold must fit in int16"));
  p->threshold = static_cast<int16_t>(threshold);
}

// Checks shapes: rows [R, D] (any rank >= 1, flattened), vectors [D], the seed [2] when used; reads the seed.
void CheckShapes(OpKernelContext* ctx, const Tensor& rows, const std::vector<const Tensor*>& same_rows,
                 const std::vector<const Tensor*>& vectors, const Tensor& bias, const Tensor& seed, Params* p) {
  OP_REQUIRES(ctx, rows.dims() >= 1,
              absl::InvalidArgumentError("XlnetResidualLayerNorm: inputs must have rank >= 1"));
  p->depth = rows.dim_size(rows.dims() - 1);
  p->rows = p->depth == 0 ? 0 : rows.NumElements() / p->depth;
  for (const Tensor* t : same_rows) {
    OP_REQUIRES(ctx, t->shape() == rows.shape(),
                absl::InvalidArgumentError(absl::StrCat("XlnetResidualLayerNorm: shapes differ: ",
                                                        rows.shape().DebugString(), " vs ",
                                                        t->shape().DebugString())));
  }
  for (const Tensor* t : vectors) {
    OP_REQUIRES(ctx, t->dims() == 1 && t->dim_size(0) == p->depth,
                absl::InvalidArgumentError(absl::StrCat("XlnetResidualLayerNorm: gamma/beta must be [",
                                                        p->depth, "], got ", t->shape().DebugString())));
  }
  OP_REQUIRES(ctx, !p->has_bias || (bias.dims() == 1 && bias.dim_size(0) == p->depth),
              absl::InvalidArgumentError(absl::StrCat("XlnetResidualLayerNorm: bias must be [", p->depth,
                                                      "], got ", bias.shape().DebugString())));
  if (!p->has_dropout) return;
  OP_REQUIRES(ctx, seed.dims() == 1 && seed.dim_size(0) == 2,
              absl::InvalidArgumentError(absl::StrCat("XlnetResidualLayerNorm: seed must be [2], got ",
                                                      seed.shape().DebugString())));
  OP_REQUIRES(ctx, rows.NumElements() < (int64_t{1} << 32),
              absl::InvalidArgumentError(absl::StrCat("XlnetResidualLayerNorm: at most 2^32 elements per call, got ",
                                                      rows.shape().DebugString())));
  p->dropout.on = true;
  p->dropout.threshold = p->threshold;
  p->dropout.scale = p->scale;
  simd::SetSeed(&p->dropout, seed.flat<int32_t>()(0), seed.flat<int32_t>()(1));
}

// Sums of a row in kLanes interleaved partial sums, added up in a fixed order: vectorisable (a plain running sum
// is one long dependency chain) and deterministic.
constexpr int kLanes = 16;

inline float LaneSum(const float* acc) {
  float total = 0.0f;
  for (int l = 0; l < kLanes; ++l) total += acc[l];
  return total;
}

// z = dropout(out + bias) + x for one row, with the row's dropout factors (RowFactors); returns (mean, rstd).
template <typename T>
inline void RowZ(const Params& p, const T* out, const T* x, const float* bias, const float* factor, float* z,
                 float* mean_out, float* rstd_out) {
  const int64_t d = p.depth;
  for (int64_t j = 0; j < d; ++j) {
    float u = ToFloat(out[j]);
    if (p.has_bias) u += bias[j];
    // Dropout as a multiply by 0 or scale, as the original's x / keep_prob * mask (a select would not vectorise).
    const float f = p.has_dropout ? factor[j] : 1.0f;
    z[j] = (p.has_dropout ? u * f : u) + ToFloat(x[j]);
  }
  float acc[kLanes] = {0.0f};
  int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += z[j + l];
  for (; j < d; ++j) acc[j % kLanes] += z[j];
  const float mean = LaneSum(acc) / static_cast<float>(d);
  float sq[kLanes] = {0.0f};
  j = 0;
  for (; j + kLanes <= d; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float c = z[j + l] - mean;
      sq[l] += c * c;
    }
  for (; j < d; ++j) sq[j % kLanes] += (z[j] - mean) * (z[j] - mean);
  const float var = LaneSum(sq) / static_cast<float>(d);
  *mean_out = mean;
  *rstd_out = 1.0f / std::sqrt(var + p.epsilon);
}

// The dropout factors of row r's elements: the bits of dropout.py's random_bits for the call's seed, hashed here
// (the same mask as the Dropout layer's, without reading a tensor of bits). Compiled for AVX-512, AVX2 and SSE.
XLNET_CLONES void RowFactors(const simd::Dropout& dropout, int64_t e0, int64_t d, uint32_t* words, float* factor) {
  simd::DropoutFactors(dropout, e0, d, words, factor);
}

// Per-thread scratch: z, and the dropout factors (padded to whole vectors) with their hash words.
struct RowScratch {
  explicit RowScratch(int64_t d) : z(d), factor(simd::Padded(d)), words(simd::Padded(d) / 2 + 2 * simd::kWidth) {}
  // Row r's dropout factors, or null without dropout.
  const float* Factors(const Params& p, int64_t r) {
    if (!p.has_dropout) return nullptr;
    RowFactors(p.dropout, r * p.depth, p.depth, words.data(), factor.data());
    return factor.data();
  }
  std::vector<float> z, factor;
  std::vector<uint32_t> words;
};

// Rows per block of the parallel loops: enough work per block, and a fixed split for deterministic sums.
inline int64_t BlockRows(const Params& p) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.depth)); }

template <typename T>
class ResidualLayerNormOp : public OpKernel {
 public:
  explicit ResidualLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &out = ctx->input(0), &x = ctx->input(1), &bias = ctx->input(2), &gamma = ctx->input(3),
                 &beta = ctx->input(4), &seed = ctx->input(5);
    Params p = params_;
    CheckShapes(ctx, x, {&out}, {&gamma, &beta}, bias, seed, &p);
    if (!ctx->status().ok()) return;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const T* out_p = out.flat<T>().data();
    const T* x_p = x.flat<T>().data();
    const float* bias_p = p.has_bias ? bias.flat<float>().data() : nullptr;
    const float* gamma_p = gamma.flat<float>().data();
    const float* beta_p = beta.flat<float>().data();
    T* y_p = y->flat<T>().data();
    const int64_t d = p.depth, block = BlockRows(p);
    const int64_t blocks = (p.rows + block - 1) / block;
    const Eigen::TensorOpCost cost(block * d * 10, block * d * sizeof(T), block * d * 12);
    ctx->eigen_device<CPUDevice>().parallelFor(blocks, cost, [&](Eigen::Index b0, Eigen::Index b1) {
      RowScratch scratch(d);
      float* z = scratch.z.data();
      for (int64_t r = b0 * block; r < std::min(p.rows, b1 * block); ++r) {
        float mean, rstd;
        const float* factor = scratch.Factors(p, r);
        RowZ<T>(p, out_p + r * d, x_p + r * d, bias_p, factor, z, &mean, &rstd);
        for (int64_t j = 0; j < d; ++j) {
          const float inv = rstd * gamma_p[j];
          y_p[r * d + j] = FromFloat<T>(z[j] * inv + (beta_p[j] - mean * inv));
        }
      }
    });
  }

 private:
  Params params_;
};

template <typename T>
class ResidualLayerNormGradOp : public OpKernel {
 public:
  explicit ResidualLayerNormGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &dy = ctx->input(0), &out = ctx->input(1), &x = ctx->input(2), &bias = ctx->input(3),
                 &gamma = ctx->input(4), &seed = ctx->input(5);
    Params p = params_;
    CheckShapes(ctx, x, {&out, &dy}, {&gamma}, bias, seed, &p);
    if (!ctx->status().ok()) return;
    Tensor *d_out = nullptr, *d_x = nullptr, *d_bias = nullptr, *d_gamma = nullptr, *d_beta = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out.shape(), &d_out));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &d_x));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma.shape(), &d_bias));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, gamma.shape(), &d_gamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, gamma.shape(), &d_beta));
    const T* dy_p = dy.flat<T>().data();
    const T* out_p = out.flat<T>().data();
    const T* x_p = x.flat<T>().data();
    const float* bias_p = p.has_bias ? bias.flat<float>().data() : nullptr;
    const float* gamma_p = gamma.flat<float>().data();
    T* d_out_p = d_out->flat<T>().data();
    T* d_x_p = d_x->flat<T>().data();
    const int64_t d = p.depth, block = BlockRows(p);
    const int64_t blocks = (p.rows + block - 1) / block;
    // Per block: partial column sums of d_bias, d_gamma, d_beta, added in block order below.
    std::vector<float> partial(static_cast<size_t>(blocks) * 3 * d, 0.0f);
    const Eigen::TensorOpCost cost(block * d * 14, block * d * 2 * sizeof(T), block * d * 30);
    ctx->eigen_device<CPUDevice>().parallelFor(blocks, cost, [&](Eigen::Index b0, Eigen::Index b1) {
      RowScratch scratch(d);
      float* z = scratch.z.data();
      std::vector<float> g(d);
      for (int64_t b = b0; b < b1; ++b) {
        float* sum_bias = partial.data() + b * 3 * d;
        float* sum_gamma = sum_bias + d;
        float* sum_beta = sum_gamma + d;
        for (int64_t r = b * block; r < std::min(p.rows, (b + 1) * block); ++r) {
          float mean, rstd;
          const float* factor = scratch.Factors(p, r);
          RowZ<T>(p, out_p + r * d, x_p + r * d, bias_p, factor, z, &mean, &rstd);
          for (int64_t j = 0; j < d; ++j) {
            const float dyj = ToFloat(dy_p[r * d + j]);
            const float xhat = (z[j] - mean) * rstd;
            z[j] = xhat;
            g[j] = dyj * gamma_p[j];
            sum_gamma[j] += dyj * xhat;
            sum_beta[j] += dyj;
          }
          float g_acc[kLanes] = {0.0f}, gx_acc[kLanes] = {0.0f};
          int64_t j = 0;
          for (; j + kLanes <= d; j += kLanes)
            for (int l = 0; l < kLanes; ++l) {
              g_acc[l] += g[j + l];
              gx_acc[l] += g[j + l] * z[j + l];
            }
          for (; j < d; ++j) {
            g_acc[j % kLanes] += g[j];
            gx_acc[j % kLanes] += g[j] * z[j];
          }
          const float g_mean = LaneSum(g_acc) / static_cast<float>(d);
          const float gx_mean = LaneSum(gx_acc) / static_cast<float>(d);
          for (int64_t j = 0; j < d; ++j) {
            const float dz = rstd * (g[j] - g_mean - z[j] * gx_mean);
            const float d_pre = p.has_dropout ? dz * factor[j] : dz;
            d_x_p[r * d + j] = FromFloat<T>(dz);
            d_out_p[r * d + j] = FromFloat<T>(d_pre);
            sum_bias[j] += d_pre;
          }
        }
      }
    });
    float* d_bias_p = d_bias->flat<float>().data();
    float* d_gamma_p = d_gamma->flat<float>().data();
    float* d_beta_p = d_beta->flat<float>().data();
    std::fill(d_bias_p, d_bias_p + d, 0.0f);
    std::fill(d_gamma_p, d_gamma_p + d, 0.0f);
    std::fill(d_beta_p, d_beta_p + d, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* s = partial.data() + b * 3 * d;
      for (int64_t j = 0; j < d; ++j) {
        d_bias_p[j] += s[j];
        d_gamma_p[j] += s[d + j];
        d_beta_p[j] += s[2 * d + j];
      }
    }
  }

 private:
  Params params_;
};

#define REGISTER(T)                                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("XlnetResidualLayerNorm").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),          \
      ResidualLayerNormOp<T>);                                                                         \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("XlnetResidualLayerNormGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),      \
      ResidualLayerNormGradOp<T>);
REGISTER(float)
REGISTER(Eigen::bfloat16)
#undef REGISTER

}  // namespace
}  // namespace xlnet_tf
