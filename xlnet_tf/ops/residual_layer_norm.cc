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

struct Params {
  int64_t rows = 0, depth = 0;
  bool has_bias = false;
  float epsilon = 0.0f;
  simd::Dropout dropout;  // attributes, and the call's hash keys (CheckShapes)
};

// Reads attributes shared by both kernels.
void ReadAttrs(OpKernelConstruction* ctx, Params* p) {
  OP_REQUIRES_OK(ctx, ctx->GetAttr("has_bias", &p->has_bias));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &p->epsilon));
  OP_REQUIRES_OK(ctx, simd::ReadDropoutAttrs(ctx, &p->dropout));
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
  if (!p->dropout.on) return;
  OP_REQUIRES_OK(ctx, simd::ReadDropoutSeed("XlnetResidualLayerNorm", seed, rows.shape(), &p->dropout));
}

// Row vectors: float32 scratch of whole 16-float vectors (simd.h), zero past the depth. Sums keep 16 lane
// partials, lane l adding elements l, l + 16, ... in order, then the lanes in order: vectorised, and independent
// of how rows are split across threads.
struct RowScratch {
  explicit RowScratch(int64_t d)
      : z(simd::Padded(d)), factor(simd::Padded(d)), g(simd::Padded(d)),
        words(simd::Padded(d) / 2 + 2 * simd::kWidth) {}
  std::vector<float> z, factor, g;
  std::vector<uint32_t> words;
};

// The row's gamma, beta and bias in float32, padded with zeros.
struct Vectors {
  std::vector<float> gamma, beta, bias;
};

// z = dropout(out + bias) + x for row r into s->z (the dropout factors into s->factor); returns (mean, rstd).
template <typename T>
XLNET_INLINE void RowZ(const Params& p, const Vectors& v, int64_t r, const T* out, const T* x, RowScratch* s,
                       float* mean_out, float* rstd_out) {
  using namespace simd;  // NOLINT
  const int64_t d = p.depth, dp = Padded(d), full = d - d % kWidth;
  float* z = s->z.data();
  LoadRow(out + r * d, d, 0.0f, z);
  if (p.dropout.on) DropoutFactors(p.dropout, r * d, d, s->words.data(), s->factor.data());
  LoadRow(x + r * d, d, 0.0f, s->g.data());  // x, briefly
  VecF acc = Splat(0.0f);
  for (int64_t j = 0; j < dp; j += kWidth) {
    VecF u = Load(z + j);
    if (p.has_bias) u += Load(v.bias.data() + j);
    // Dropout as a multiply by 0 or scale, as the original's x / keep_prob * mask.
    if (p.dropout.on) u *= Load(s->factor.data() + j);
    const VecF zj = u + Load(s->g.data() + j);  // zero past the depth
    Store(z + j, zj);
    acc += zj;
  }
  const float mean = LaneSum(acc) / static_cast<float>(d);
  VecF sq = Splat(0.0f);
  for (int64_t j = 0; j < full; j += kWidth) {
    const VecF c = Load(z + j) - mean;
    sq += c * c;
  }
  if (full < d) {  // the last partial vector: only the lanes within the depth
    const VecI lane = VecI{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const VecF c = Select(lane < static_cast<int32_t>(d - full), Load(z + full) - mean, Splat(0.0f));
    sq += c * c;
  }
  const float var = LaneSum(sq) / static_cast<float>(d);
  *mean_out = mean;
  *rstd_out = 1.0f / std::sqrt(var + p.epsilon);
}

template <typename T>
XLNET_INLINE void ForwardRowsImpl(const Params& p, const Vectors& v, const T* out, const T* x, T* y, int64_t r0,
                                  int64_t r1) {
  using namespace simd;  // NOLINT
  RowScratch s(p.depth);
  float* z = s.z.data();
  for (int64_t r = r0; r < r1; ++r) {
    float mean, rstd;
    RowZ(p, v, r, out, x, &s, &mean, &rstd);
    for (int64_t j = 0; j < Padded(p.depth); j += kWidth) {
      const VecF inv = rstd * Load(v.gamma.data() + j);
      Store(z + j, Load(z + j) * inv + (Load(v.beta.data() + j) - mean * inv));  // tf.nn.batch_normalization
    }
    StoreRow(z, p.depth, y + r * p.depth);
  }
}

// Rows [r0, r1): d_out and d_x, and the rows' column sums of d_bias, d_gamma and d_beta into sums (3 padded rows).
template <typename T>
XLNET_INLINE void BackwardRowsImpl(const Params& p, const Vectors& v, const T* dy, const T* out, const T* x,
                                   T* d_out, T* d_x, float* sums, int64_t r0, int64_t r1) {
  using namespace simd;  // NOLINT
  const int64_t d = p.depth, dp = Padded(d);
  RowScratch s(d);
  float *z = s.z.data(), *g = s.g.data(), *factor = s.factor.data();
  float *sum_bias = sums, *sum_gamma = sums + dp, *sum_beta = sums + 2 * dp;
  for (int64_t r = r0; r < r1; ++r) {
    float mean, rstd;
    RowZ(p, v, r, out, x, &s, &mean, &rstd);
    LoadRow(dy + r * d, d, 0.0f, g);  // dy, then g = dy * gamma
    VecF g_acc = Splat(0.0f), gx_acc = Splat(0.0f);
    for (int64_t j = 0; j < dp; j += kWidth) {
      const VecF dyj = Load(g + j);
      const VecF xhat = (Load(z + j) - mean) * rstd;
      const VecF gj = dyj * Load(v.gamma.data() + j);
      Store(z + j, xhat);
      Store(g + j, gj);
      Store(sum_gamma + j, Load(sum_gamma + j) + dyj * xhat);
      Store(sum_beta + j, Load(sum_beta + j) + dyj);
      g_acc += gj;
      gx_acc += gj * xhat;  // zero past the depth: gamma is padded with zeros
    }
    const float g_mean = LaneSum(g_acc) / static_cast<float>(d);
    const float gx_mean = LaneSum(gx_acc) / static_cast<float>(d);
    for (int64_t j = 0; j < dp; j += kWidth) {
      const VecF dz = rstd * (Load(g + j) - g_mean - Load(z + j) * gx_mean);
      const VecF d_pre = p.dropout.on ? dz * Load(factor + j) : dz;
      Store(z + j, dz);
      Store(g + j, d_pre);
      Store(sum_bias + j, Load(sum_bias + j) + d_pre);
    }
    StoreRow(z, d, d_x + r * d);
    StoreRow(g, d, d_out + r * d);
  }
}

XLNET_CLONES void ForwardRows(const Params& p, const Vectors& v, const float* out, const float* x, float* y,
                              int64_t r0, int64_t r1) {
  ForwardRowsImpl(p, v, out, x, y, r0, r1);
}
XLNET_CLONES void ForwardRows(const Params& p, const Vectors& v, const Eigen::bfloat16* out, const Eigen::bfloat16* x,
                              Eigen::bfloat16* y, int64_t r0, int64_t r1) {
  ForwardRowsImpl(p, v, out, x, y, r0, r1);
}
XLNET_CLONES void BackwardRows(const Params& p, const Vectors& v, const float* dy, const float* out, const float* x,
                               float* d_out, float* d_x, float* sums, int64_t r0, int64_t r1) {
  BackwardRowsImpl(p, v, dy, out, x, d_out, d_x, sums, r0, r1);
}
XLNET_CLONES void BackwardRows(const Params& p, const Vectors& v, const Eigen::bfloat16* dy,
                               const Eigen::bfloat16* out, const Eigen::bfloat16* x, Eigen::bfloat16* d_out,
                               Eigen::bfloat16* d_x, float* sums, int64_t r0, int64_t r1) {
  BackwardRowsImpl(p, v, dy, out, x, d_out, d_x, sums, r0, r1);
}

// gamma, beta (float32 [D]) and the bias (when used) as padded float32 vectors.
Vectors PaddedVectors(const Params& p, const Tensor& gamma, const Tensor* beta, const Tensor& bias) {
  Vectors v;
  const int64_t dp = simd::Padded(p.depth);
  auto copy = [&](const Tensor& t, std::vector<float>* out) {
    out->assign(dp, 0.0f);
    std::copy_n(t.flat<float>().data(), p.depth, out->begin());
  };
  copy(gamma, &v.gamma);
  if (beta != nullptr) copy(*beta, &v.beta);
  if (p.has_bias) copy(bias, &v.bias);
  return v;
}

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
    const Vectors v = PaddedVectors(p, gamma, &beta, bias);
    const T* out_p = out.flat<T>().data();
    const T* x_p = x.flat<T>().data();
    T* y_p = y->flat<T>().data();
    const int64_t d = p.depth;
    const Eigen::TensorOpCost cost(d * 2 * sizeof(T), d * sizeof(T), d * 12);
    ctx->eigen_device<CPUDevice>().parallelFor(p.rows, cost, [&](Eigen::Index r0, Eigen::Index r1) {
      ForwardRows(p, v, out_p, x_p, y_p, r0, r1);
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
    const Vectors v = PaddedVectors(p, gamma, nullptr, bias);
    const T* dy_p = dy.flat<T>().data();
    const T* out_p = out.flat<T>().data();
    const T* x_p = x.flat<T>().data();
    T* d_out_p = d_out->flat<T>().data();
    T* d_x_p = d_x->flat<T>().data();
    const int64_t d = p.depth, dp = simd::Padded(d), block = BlockRows(p);
    const int64_t blocks = (p.rows + block - 1) / block;
    // Per block: partial column sums of d_bias, d_gamma, d_beta, added in block order below.
    std::vector<float> partial(static_cast<size_t>(blocks) * 3 * dp, 0.0f);
    const Eigen::TensorOpCost cost(block * d * 3 * sizeof(T), block * d * 2 * sizeof(T), block * d * 30);
    ctx->eigen_device<CPUDevice>().parallelFor(blocks, cost, [&](Eigen::Index b0, Eigen::Index b1) {
      for (int64_t b = b0; b < b1; ++b)
        BackwardRows(p, v, dy_p, out_p, x_p, d_out_p, d_x_p, partial.data() + b * 3 * dp, b * block,
                     std::min(p.rows, (b + 1) * block));
    });
    float* d_bias_p = d_bias->flat<float>().data();
    float* d_gamma_p = d_gamma->flat<float>().data();
    float* d_beta_p = d_beta->flat<float>().data();
    std::fill(d_bias_p, d_bias_p + d, 0.0f);
    std::fill(d_gamma_p, d_gamma_p + d, 0.0f);
    std::fill(d_beta_p, d_beta_p + d, 0.0f);
    for (int64_t b = 0; b < blocks; ++b) {
      const float* s = partial.data() + b * 3 * dp;
      for (int64_t j = 0; j < d; ++j) {
        d_bias_p[j] += s[j];
        d_gamma_p[j] += s[dp + j];
        d_beta_p[j] += s[2 * dp + j];
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
