// XlnetCrossEntropy / XlnetCrossEntropyGrad: the LM head's cross-entropy and accuracy, one pass each way.
//
// The pretraining loss reads logits [R, V] (R prediction rows, V = 32,000 words: 51 MB at R = 400). TensorFlow's
// SparseSoftmaxCrossEntropyWithLogits writes its gradient (softmax - one_hot) in the forward pass, ArgMax reads
// the logits again for the accuracy, and the backward pass multiplies that gradient by each row's loss weight:
// four passes over R x V floats besides the LM head's matmuls. Here the forward pass reads each row once (in
// cache) for its maximum, arg max and log-normaliser, and the backward pass writes the weighted gradient directly.
//
// Forward, row r (float32):  m = max_j x_j;  a = first j with x_j = m;  z = m + log sum_j exp(x_j - m)
//   loss_r = z - x_label,  hit_r = (a == label ? 1 : 0),  log_norm_r = z (kept for the gradient)
// Backward, with g = d_loss_r:  d_x_j = exp(x_j - z) * g - (j == label ? g : 0)
// Maxima and sums keep 16 lane partials combined in a fixed order: results do not depend on the thread split.

#define EIGEN_USE_THREADS

#include <cmath>
#include <cstdint>

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
using ::tensorflow::shape_inference::ShapeHandle;
using CPUDevice = Eigen::ThreadPoolDevice;
using namespace simd;  // NOLINT: the kernels' vocabulary

REGISTER_OP("XlnetCrossEntropy")
    .Input("logits: float")
    .Input("labels: int32")
    .Output("loss: float")
    .Output("hit: float")
    .Output("log_norm: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle logits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &logits));
      const ShapeHandle rows = c->Vector(c->Dim(logits, 0));
      for (int i = 0; i < 3; ++i) c->set_output(i, rows);
      return absl::OkStatus();
    })
    .Doc("Per row of [R, V] logits: -log softmax[label], whether label is the first arg max, log-normaliser.");

REGISTER_OP("XlnetCrossEntropyGrad")
    .Input("d_loss: float")
    .Input("logits: float")
    .Input("labels: int32")
    .Input("log_norm: float")
    .Output("d_logits: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      return absl::OkStatus();
    })
    .Doc("Gradient of XlnetCrossEntropy's loss w.r.t. the logits: (softmax - one_hot(label)) * d_loss per row.");

const VecI kLane = VecI{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

struct Rows {
  const float* logits;
  const int32_t* labels;
  int64_t vocab;
};

// Row r's loss, hit and log-normaliser. The arg max is tracked per lane (strictly greater: the lane's first
// maximum), then the lanes' maxima are combined, a tie going to the smaller index: the first maximum of the row.
XLNET_INLINE void ForwardRowImpl(const Rows& a, int64_t r, float* loss, float* hit, float* log_norm) {
  const float* x = a.logits + r * a.vocab;
  const int64_t v = a.vocab, full = v - v % kWidth;
  VecF vmax = Splat(-INFINITY);
  VecI varg = kLane;
  for (int64_t j = 0; j < full; j += kWidth) {
    const VecF e = Load(x + j);
    const VecI greater = e > vmax;
    vmax = Select(greater, e, vmax);
    varg = (greater & (kLane + static_cast<int32_t>(j))) | (~greater & varg);
  }
  float row_max = x[0];
  int64_t arg = 0;
  if (full > 0) {
    row_max = vmax[0], arg = varg[0];
    for (int l = 1; l < kWidth; ++l)
      if (vmax[l] > row_max || (vmax[l] == row_max && varg[l] < arg)) row_max = vmax[l], arg = varg[l];
  }
  for (int64_t j = full > 0 ? full : 1; j < v; ++j)  // the tail's indices follow every lane's
    if (x[j] > row_max) row_max = x[j], arg = j;
  VecF vsum = Splat(0.0f);
  for (int64_t j = 0; j < full; j += kWidth) vsum += ExpNonPositive(Load(x + j) - row_max);
  float sum = LaneSum(vsum);
  if (full < v) {
    const VecF tail = LoadPartial(x + full, v - full);
    const VecI valid = kLane < static_cast<int32_t>(v - full);
    sum += LaneSum(Select(valid, ExpNonPositive(tail - row_max), Splat(0.0f)));
  }
  const float z = row_max + std::log(sum);
  const int32_t label = a.labels[r];
  log_norm[r] = z;
  loss[r] = z - x[label];
  hit[r] = arg == label ? 1.0f : 0.0f;
}

XLNET_CLONES void ForwardRows(const Rows& a, int64_t r0, int64_t r1, float* loss, float* hit, float* log_norm) {
  for (int64_t r = r0; r < r1; ++r) ForwardRowImpl(a, r, loss, hit, log_norm);
}

XLNET_CLONES void BackwardRows(const Rows& a, const float* d_loss, const float* log_norm, int64_t r0, int64_t r1,
                               float* d_logits) {
  const int64_t v = a.vocab, full = v - v % kWidth;
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = a.logits + r * v;
    float* d = d_logits + r * v;
    const float g = d_loss[r], z = log_norm[r];
    for (int64_t j = 0; j < full; j += kWidth) Store(d + j, ExpNonPositive(Load(x + j) - z) * g);
    if (full < v) StorePartial(d + full, ExpNonPositive(LoadPartial(x + full, v - full) - z) * g, v - full);
    d[a.labels[r]] -= g;
  }
}

// Checks logits [R, V] and labels [R] in [0, V); fills the row arguments.
void CheckRows(OpKernelContext* ctx, const char* op, const Tensor& logits, const Tensor& labels, Rows* a) {
  OP_REQUIRES(ctx, logits.dims() == 2 && logits.dim_size(1) >= 1,
              absl::InvalidArgumentError(absl::StrCat(op, ": logits must be [R, V], got ",
                                                      logits.shape().DebugString())));
  OP_REQUIRES(ctx, labels.dims() == 1 && labels.dim_size(0) == logits.dim_size(0),
              absl::InvalidArgumentError(absl::StrCat(op, ": labels must be [R] = [", logits.dim_size(0), "], got ",
                                                      labels.shape().DebugString())));
  a->logits = logits.flat<float>().data();
  a->labels = labels.flat<int32_t>().data();
  a->vocab = logits.dim_size(1);
  for (int64_t r = 0; r < labels.dim_size(0); ++r)
    OP_REQUIRES(ctx, a->labels[r] >= 0 && a->labels[r] < a->vocab,
                absl::InvalidArgumentError(absl::StrCat(op, ": label ", a->labels[r], " of row ", r,
                                                        " is outside the vocabulary [0, ", a->vocab, ")")));
}

class CrossEntropyOp : public OpKernel {
 public:
  explicit CrossEntropyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor &logits = ctx->input(0), &labels = ctx->input(1);
    Rows a;
    CheckRows(ctx, "XlnetCrossEntropy", logits, labels, &a);
    if (!ctx->status().ok()) return;
    const ::tensorflow::TensorShape rows({logits.dim_size(0)});
    Tensor *loss = nullptr, *hit = nullptr, *log_norm = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, rows, &loss));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, rows, &hit));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, rows, &log_norm));
    float *l = loss->flat<float>().data(), *h = hit->flat<float>().data(), *z = log_norm->flat<float>().data();
    const Eigen::TensorOpCost cost(a.vocab * 4, 12, a.vocab * 20);
    ctx->eigen_device<CPUDevice>().parallelFor(logits.dim_size(0), cost, [&](Eigen::Index r0, Eigen::Index r1) {
      ForwardRows(a, r0, r1, l, h, z);
    });
  }
};

class CrossEntropyGradOp : public OpKernel {
 public:
  explicit CrossEntropyGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor &d_loss = ctx->input(0), &logits = ctx->input(1), &labels = ctx->input(2),
                 &log_norm = ctx->input(3);
    const char* op = "XlnetCrossEntropyGrad";
    Rows a;
    CheckRows(ctx, op, logits, labels, &a);
    if (!ctx->status().ok()) return;
    OP_REQUIRES(ctx, d_loss.shape() == labels.shape() && log_norm.shape() == labels.shape(),
                absl::InvalidArgumentError(absl::StrCat(op, ": d_loss and log_norm must be [R] = [",
                                                        labels.dim_size(0), "], got ", d_loss.shape().DebugString(),
                                                        " and ", log_norm.shape().DebugString())));
    Tensor* d_logits = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, logits.shape(), &d_logits));
    const float *g = d_loss.flat<float>().data(), *z = log_norm.flat<float>().data();
    float* d = d_logits->flat<float>().data();
    const Eigen::TensorOpCost cost(a.vocab * 4, a.vocab * 4, a.vocab * 20);
    ctx->eigen_device<CPUDevice>().parallelFor(logits.dim_size(0), cost, [&](Eigen::Index r0, Eigen::Index r1) {
      BackwardRows(a, g, z, r0, r1, d);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("XlnetCrossEntropy").Device(::tensorflow::DEVICE_CPU), CrossEntropyOp);
REGISTER_KERNEL_BUILDER(Name("XlnetCrossEntropyGrad").Device(::tensorflow::DEVICE_CPU), CrossEntropyGradOp);

}  // namespace
}  // namespace xlnet_tf
