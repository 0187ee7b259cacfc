// XlnetFusedAdamW: one pass over a float32 variable for the whole AdamW update.
//
// What the optimizer otherwise runs as three memory-bound passes per variable (the clip multiply of the
// gradient, the decoupled weight decay of the variable, TensorFlow's ResourceApplyAdam), as one:
//
//   g   = grad * grad_scale                                   (global-norm clipping; 1 = none)
//   m  += (g - m) * (1 - beta1)
//   v  += (g * g - v) * (1 - beta2)
//   var = var * decay - (m * alpha) / (sqrt(v) + epsilon)      (decay = 1 - weight_decay * lr)
//   alpha = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
//
// Each product is rounded as ResourceApplyAdam's Eigen expressions round it (compiled without FMA
// contraction), so the result is bit-identical to that sequence of ops. CPU only; variables are locked as
// TensorFlow's training ops lock them and copied first if a read still holds their buffer.

#define EIGEN_USE_THREADS

#include <cmath>
#include <cstdint>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/kernels/training_op_helpers.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace xlnet_tf {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_OP("XlnetFusedAdamW")
    .Input("var: resource")
    .Input("m: resource")
    .Input("v: resource")
    .Input("grad: float")
    .Input("grad_scale: float")
    .Input("decay: float")
    .Input("lr: float")
    .Input("beta1_power: float")
    .Input("beta2_power: float")
    .Input("beta1: float")
    .Input("beta2: float")
    .Input("epsilon: float")
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      ::tensorflow::shape_inference::ShapeHandle unused;
      for (int i = 4; i < 12; ++i) TF_RETURN_IF_ERROR(c->WithRank(c->input(i), 0, &unused));
      return absl::OkStatus();
    })
    .Doc("AdamW (clip scale, decoupled decay, Adam) on a float32 variable and its two moments in one pass.");

// The update of elements [0, n). target_clones: AVX2 where the CPU has it (chosen at load time), SSE2 otherwise.
__attribute__((target_clones("avx2", "default"))) void UpdateRange(
    float* __restrict var, float* __restrict m, float* __restrict v, const float* __restrict grad, int64_t n,
    float grad_scale, float decay, float alpha, float one_minus_beta1, float one_minus_beta2, float epsilon) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float m_i = m[i] + (g - m[i]) * one_minus_beta1;
    const float v_i = v[i] + (g * g - v[i]) * one_minus_beta2;
    m[i] = m_i;
    v[i] = v_i;
    var[i] = var[i] * decay - (m_i * alpha) / (std::sqrt(v_i) + epsilon);
  }
}

class FusedAdamWOp : public OpKernel {
 public:
  explicit FusedAdamWOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < 3; ++i) {  // before the helpers below, which treat the buffers as float32
      ::tensorflow::core::RefCountPtr<::tensorflow::Var> resource;
      OP_REQUIRES_OK(ctx, ::tensorflow::LookupResource(ctx, ::tensorflow::HandleFromInput(ctx, i), &resource));
      OP_REQUIRES(ctx, resource->tensor()->dtype() == ::tensorflow::DT_FLOAT,
                  absl::InvalidArgumentError(absl::StrCat(
                      "XlnetFusedAdamW: input ", i, " must be a float32 variable, got ",
                      ::tensorflow::DataTypeString(resource->tensor()->dtype()))));
    }
    auto locks = ::tensorflow::MaybeLockVariableInputMutexesInOrder<CPUDevice, float>(
        ctx, /*do_lock=*/true, /*sparse=*/false, {0, 1, 2});
    Tensor var, m, v;
    OP_REQUIRES_OK(ctx, (::tensorflow::GetInputTensorFromVariable<CPUDevice, float>(ctx, 0, true, false, &var)));
    OP_REQUIRES_OK(ctx, (::tensorflow::GetInputTensorFromVariable<CPUDevice, float>(ctx, 1, true, false, &m)));
    OP_REQUIRES_OK(ctx, (::tensorflow::GetInputTensorFromVariable<CPUDevice, float>(ctx, 2, true, false, &v)));
    for (const Tensor* t : {&var, &m, &v}) {
      OP_REQUIRES(ctx, t->IsInitialized(),
                  absl::FailedPreconditionError("XlnetFusedAdamW: var, m and v must be initialised"));
    }
    const Tensor& grad = ctx->input(3);
    OP_REQUIRES(ctx,
                var.shape().IsSameSize(m.shape()) && var.shape().IsSameSize(v.shape()) &&
                    var.shape().IsSameSize(grad.shape()),
                absl::InvalidArgumentError(absl::StrCat(
                    "XlnetFusedAdamW: var, m, v and grad must have one shape, got ", var.shape().DebugString(),
                    " ", m.shape().DebugString(), " ", v.shape().DebugString(), " ", grad.shape().DebugString())));
    float s[8];
    for (int i = 0; i < 8; ++i) {
      const Tensor& t = ctx->input(4 + i);
      OP_REQUIRES(ctx, ::tensorflow::TensorShapeUtils::IsScalar(t.shape()),
                  absl::InvalidArgumentError(absl::StrCat("XlnetFusedAdamW: input ", 4 + i, " must be a scalar")));
      s[i] = t.scalar<float>()();
    }
    const float grad_scale = s[0], decay = s[1], lr = s[2], beta1_power = s[3], beta2_power = s[4];
    const float beta1 = s[5], beta2 = s[6], epsilon = s[7];
    // ResourceApplyAdam's step size, rounded as it rounds it.
    const float alpha = lr * Eigen::numext::sqrt(1.0f - beta2_power) / (1.0f - beta1_power);
    const float one_minus_beta1 = 1.0f - beta1, one_minus_beta2 = 1.0f - beta2;

    float* var_p = var.flat<float>().data();
    float* m_p = m.flat<float>().data();
    float* v_p = v.flat<float>().data();
    const float* g_p = grad.flat<float>().data();
    const int64_t n = var.NumElements();
    // Per element: 4 floats read, 3 written, ~15 cycles of arithmetic (a divide and a square root).
    const Eigen::TensorOpCost cost(4 * sizeof(float), 3 * sizeof(float), 15);
    ctx->eigen_device<CPUDevice>().parallelFor(n, cost, [=](Eigen::Index begin, Eigen::Index end) {
      UpdateRange(var_p + begin, m_p + begin, v_p + begin, g_p + begin, end - begin, grad_scale, decay, alpha,
                  one_minus_beta1, one_minus_beta2, epsilon);
    });
  }
};

REGISTER_KERNEL_BUILDER(Name("XlnetFusedAdamW").Device(::tensorflow::DEVICE_CPU), FusedAdamWOp);

}  // namespace
}  // namespace xlnet_tf
