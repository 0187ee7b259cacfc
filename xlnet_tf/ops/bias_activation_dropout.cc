// XlnetBiasActivationDropout / XlnetBiasActivationDropoutGrad: the feed-forward block's dropout(act(h + bias)).
//
// In training, the inner activation of every feed-forward block, forward and backward, one pass over [R, D] rows
// each way (rows split across threads), with the dropout bits hashed from the layer's seed (simd.h) instead of
// read from a tensor. All math in float32; h, bias, y and the gradients are in T.
//
//   u = h + bias;  a = act(u);  y = a * f,  f = (bits >= threshold ? scale : 0)   (no dropout: f = 1)
//   gelu (the original's tanh form, written as a sigmoid: 0.5 (1 + tanh(t)) = sigmoid(2 t)):
//     a = u * s,  s = sigmoid(z),  z = u (c + c3 u^2),  c = 2 sqrt(2 / pi),  c3 = 0.044715 c
//     da/du = s + u s (1 - s) (c + 3 c3 u^2)
//   relu: a = max(u, 0), da/du = (u > 0)
// Backward: dh = dy * f * da/du;  d_bias = sum over rows of dh, accumulated per fixed block of rows and added in
// block order (deterministic).

#define EIGEN_USE_THREADS

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
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
using namespace simd;  // NOLINT: the kernels' vocabulary

REGISTER_OP("XlnetBiasActivationDropout")
    .Input("h: T")
    .Input("bias: T")
    .Input("seed: int32")
    .Output("y: T")
    .Attr("T: {float, bfloat16}")
    .Attr("activation: {'gelu', 'relu'}")
    .Attr("has_dropout: bool")
    .Attr("threshold: int")
    .Attr("scale: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("dropout(activation(h + bias)) over [R, D] rows, in float32.");

REGISTER_OP("XlnetBiasActivationDropoutGrad")
    .Input("dy: T")
    .Input("h: T")
    .Input("bias: T")
    .Input("seed: int32")
    .Output("d_h: T")
    .Output("d_bias: T")
    .Attr("T: {float, bfloat16}")
    .Attr("activation: {'gelu', 'relu'}")
    .Attr("has_dropout: bool")
    .Attr("threshold: int")
    .Attr("scale: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      return absl::OkStatus();
    })
    .Doc("Gradient of XlnetBiasActivationDropout (recomputes the forward).");

constexpr float kGeluC = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constexpr float kGeluC3 = static_cast<float>(0.044715 * 1.5957691216057308);

// sigmoid(z) = 1 / (1 + exp(-z)), from exp(-|z|) <= 1 so that it never overflows.
XLNET_INLINE VecF Sigmoid(VecF z) {
  const VecI negative = z < 0.0f;
  const VecF e = ExpNonPositive(Select(negative, z, -z));
  const VecF inv = 1.0f / (1.0f + e);
  return Select(negative, e * inv, inv);
}

struct Params {
  bool gelu = true;
  Dropout dropout;
  int64_t rows = 0, depth = 0;
};

// One row: u = h + bias into padded scratch (u), and the dropout factors when on.
template <typename T>
XLNET_INLINE void RowInput(const Params& p, int64_t r, const T* h, const float* bias, float* u, uint32_t* words,
                           float* factor) {
  LoadRow(h + r * p.depth, p.depth, 0.0f, u);
  for (int64_t j = 0; j < Padded(p.depth); j += kWidth) Store(u + j, Load(u + j) + Load(bias + j));
  if (p.dropout.on) DropoutFactors(p.dropout, r * p.depth, p.depth, words, factor);
}

struct Scratch {
  explicit Scratch(int64_t d) : u(Padded(d)), factor(Padded(d)), words(Padded(d) / 2 + 2 * kWidth) {}
  std::vector<float> u, factor;
  std::vector<uint32_t> words;
};

template <typename T>
XLNET_INLINE void ForwardRowsImpl(const Params& p, const T* h, const float* bias, T* y, int64_t r0, int64_t r1) {
  Scratch s(p.depth);
  float *u = s.u.data(), *factor = s.factor.data();
  for (int64_t r = r0; r < r1; ++r) {
    RowInput(p, r, h, bias, u, s.words.data(), factor);
    for (int64_t j = 0; j < Padded(p.depth); j += kWidth) {
      const VecF x = Load(u + j);
      VecF a;
      if (p.gelu) {
        a = x * Sigmoid(x * (kGeluC + kGeluC3 * (x * x)));
      } else {
        a = Select(x > 0.0f, x, Splat(0.0f));
      }
      if (p.dropout.on) a *= Load(factor + j);
      Store(u + j, a);
    }
    StoreRow(u, p.depth, y + r * p.depth);
  }
}

// Rows [r0, r1) of the backward pass; adds the rows' d_h into column_sum (padded).
template <typename T>
XLNET_INLINE void BackwardRowsImpl(const Params& p, const T* dy, const T* h, const float* bias, T* d_h,
                                   float* column_sum, int64_t r0, int64_t r1) {
  Scratch s(p.depth);
  std::vector<float> g(Padded(p.depth));
  float *u = s.u.data(), *factor = s.factor.data();
  for (int64_t r = r0; r < r1; ++r) {
    RowInput(p, r, h, bias, u, s.words.data(), factor);
    LoadRow(dy + r * p.depth, p.depth, 0.0f, g.data());
    for (int64_t j = 0; j < Padded(p.depth); j += kWidth) {
      const VecF x = Load(u + j);
      VecF grad = Load(g.data() + j);
      if (p.dropout.on) grad *= Load(factor + j);
      VecF slope;
      if (p.gelu) {
        const VecF x2 = x * x;
        const VecF sig = Sigmoid(x * (kGeluC + kGeluC3 * x2));
        slope = sig + x * sig * (1.0f - sig) * (kGeluC + (3.0f * kGeluC3) * x2);
      } else {
        slope = Select(x > 0.0f, Splat(1.0f), Splat(0.0f));
      }
      const VecF dx = grad * slope;
      Store(u + j, dx);
      Store(column_sum + j, Load(column_sum + j) + dx);
    }
    StoreRow(u, p.depth, d_h + r * p.depth);
  }
}

XLNET_CLONES void ForwardRows(const Params& p, const float* h, const float* bias, float* y, int64_t r0, int64_t r1) {
  ForwardRowsImpl(p, h, bias, y, r0, r1);
}
XLNET_CLONES void ForwardRows(const Params& p, const Eigen::bfloat16* h, const float* bias, Eigen::bfloat16* y,
                              int64_t r0, int64_t r1) {
  ForwardRowsImpl(p, h, bias, y, r0, r1);
}
XLNET_CLONES void BackwardRows(const Params& p, const float* dy, const float* h, const float* bias, float* d_h,
                               float* column_sum, int64_t r0, int64_t r1) {
  BackwardRowsImpl(p, dy, h, bias, d_h, column_sum, r0, r1);
}
XLNET_CLONES void BackwardRows(const Params& p, const Eigen::bfloat16* dy, const Eigen::bfloat16* h,
                               const float* bias, Eigen::bfloat16* d_h, float* column_sum, int64_t r0, int64_t r1) {
  BackwardRowsImpl(p, dy, h, bias, d_h, column_sum, r0, r1);
}

// Attributes shared by both kernels.
void ReadAttrs(OpKernelConstruction* ctx, Params* p) {
  std::string activation;
  OP_REQUIRES_OK(ctx, ctx->GetAttr("activation", &activation));
  OP_REQUIRES_OK(ctx, ReadDropoutAttrs(ctx, &p->dropout));
  p->gelu = activation == "gelu";
}

// Checks h [..., D] against bias [D] and the seed; fills rows, depth and the hash keys, and bias_f with the bias
// in float32 (padded to whole vectors).
template <typename T>
void CheckInputs(OpKernelContext* ctx, const char* op, const Tensor& h, const Tensor& bias, const Tensor& seed,
                 Params* p, std::vector<float>* bias_f) {
  OP_REQUIRES(ctx, h.dims() >= 1,
              absl::InvalidArgumentError(absl::StrCat(op, ": h must have rank >= 1")));
  p->depth = h.dim_size(h.dims() - 1);
  p->rows = p->depth == 0 ? 0 : h.NumElements() / p->depth;
  OP_REQUIRES(ctx, bias.dims() == 1 && bias.dim_size(0) == p->depth,
              absl::InvalidArgumentError(absl::StrCat(op, ": bias must be [", p->depth, "], got ",
                                                      bias.shape().DebugString())));
  if (p->dropout.on) OP_REQUIRES_OK(ctx, ReadDropoutSeed(op, seed, h.shape(), &p->dropout));
  bias_f->assign(Padded(p->depth), 0.0f);
  const auto b = bias.flat<T>();
  for (int64_t j = 0; j < p->depth; ++j) (*bias_f)[j] = ToFloat(b(j));
}

template <typename T>
class BiasActivationDropoutOp : public OpKernel {
 public:
  explicit BiasActivationDropoutOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &h = ctx->input(0), &bias = ctx->input(1), &seed = ctx->input(2);
    Params p = params_;
    std::vector<float> bias_f;
    CheckInputs<T>(ctx, "XlnetBiasActivationDropout", h, bias, seed, &p, &bias_f);
    if (!ctx->status().ok()) return;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, h.shape(), &y));
    const T* h_p = h.flat<T>().data();
    T* y_p = y->flat<T>().data();
    const int64_t d = p.depth;
    const Eigen::TensorOpCost cost(d * sizeof(T), d * sizeof(T), d * 40);
    ctx->eigen_device<CPUDevice>().parallelFor(p.rows, cost, [&](Eigen::Index r0, Eigen::Index r1) {
      ForwardRows(p, h_p, bias_f.data(), y_p, r0, r1);
    });
  }

 private:
  Params params_;
};

template <typename T>
class BiasActivationDropoutGradOp : public OpKernel {
 public:
  explicit BiasActivationDropoutGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &params_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &dy = ctx->input(0), &h = ctx->input(1), &bias = ctx->input(2), &seed = ctx->input(3);
    Params p = params_;
    const char* op = "XlnetBiasActivationDropoutGrad";
    std::vector<float> bias_f;
    CheckInputs<T>(ctx, op, h, bias, seed, &p, &bias_f);
    if (!ctx->status().ok()) return;
    OP_REQUIRES(ctx, dy.shape() == h.shape(),
                absl::InvalidArgumentError(absl::StrCat(op, ": dy must be shaped like h ", h.shape().DebugString(),
                                                        ", got ", dy.shape().DebugString())));
    Tensor *d_h = nullptr, *d_bias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, h.shape(), &d_h));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &d_bias));
    const T* dy_p = dy.flat<T>().data();
    const T* h_p = h.flat<T>().data();
    T* d_h_p = d_h->flat<T>().data();
    const int64_t d = p.depth, dp = Padded(d);
    // Fixed blocks of rows, each with its own column sums, added in block order below: deterministic.
    const int64_t block = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, d));
    const int64_t blocks = (p.rows + block - 1) / block;
    std::vector<float> partial(static_cast<size_t>(blocks) * dp, 0.0f);
    const Eigen::TensorOpCost cost(block * d * 2 * sizeof(T), block * d * sizeof(T), block * d * 50);
    ctx->eigen_device<CPUDevice>().parallelFor(blocks, cost, [&](Eigen::Index b0, Eigen::Index b1) {
      for (int64_t b = b0; b < b1; ++b)
        BackwardRows(p, dy_p, h_p, bias_f.data(), d_h_p, partial.data() + b * dp, b * block,
                     std::min(p.rows, (b + 1) * block));
    });
    std::vector<float> total(dp, 0.0f);
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t j = 0; j < d; ++j) total[j] += partial[b * dp + j];
    auto out = d_bias->flat<T>();
    for (int64_t j = 0; j < d; ++j) out(j) = static_cast<T>(total[j]);
  }

 private:
  Params params_;
};

#define REGISTER(T)                                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("XlnetBiasActivationDropout").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),      \
      BiasActivationDropoutOp<T>);                                                                     \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("XlnetBiasActivationDropoutGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),  \
      BiasActivationDropoutGradOp<T>);
REGISTER(float)
REGISTER(Eigen::bfloat16)
#undef REGISTER

}  // namespace
}  // namespace xlnet_tf
