// XlnetAttentionProbs / XlnetAttentionProbsGrad: XLNet's attention probabilities from its score terms.
//
// Between the score matmuls and prob . v, every attention call of a training step is a chain of element-wise
// steps over [N, B, Q, K] tensors: the relative shift (or, for the query stream, a gather) of the position
// scores, the segment term, the mask, a float32 softmax and dropout. As TensorFlow kernels that is about ten
// passes over memory forward and as many backward (slices, pads, adds, casts, the softmax gradient's products
// and sums). Here each direction is one pass over rows of K keys held in cache, rows split across threads.
//
// Forward, for row (n, b, i) with key coordinate qp = query_pos[b, i] (mlen + i for the content stream; the
// target's position for the query stream) and key j at coordinate kp_j = key_pos[b, j] (without key_pos: j, the
// consecutive keys), all in float32:
//   s_j    = ac_j + bd[clamp(K - qp + kp_j, 0, R - 1)] + ef * segment_diff[b, i, j] + mask[b or 0, i, j]
//   p_j    = exp(s_j - max s) / sum_k exp(s_k - max s)                  (output `softmax`, kept for the gradient)
//   prob_j = p_j * f_j,  f_j = (bits_j >= threshold ? scale : 0)        (output `prob`, in T; no dropout: f_j = 1)
// bits_j are the 16-bit dropout values of xlnet_tf/kernels/dropout_mask.py's random_bits for `seed`, hashed here from
// the element's index (word e / 2 of the counter hash, its low half for even e) instead of read from memory, so
// the mask is the one the Dropout layer would draw, in either direction, without a [N, B, Q, K] tensor of bits.
// For the content stream the bd column K - qp + j = Lq - i + j is Transformer-XL's rel_shift; for the query
// stream it reads the row's target position; with key_pos (UniLMv2's appended tokens sit at the positions of the
// tokens they copy) it reads each key's own. Clamped columns only occur for keys that a mask hides.
// Backward, with g_j = d_prob_j * f_j:
//   d_s_j = (g_j - sum_k g_k p_k) * p_j   (TensorFlow's SoftmaxGrad);  d_ac = d_s;
//   d_bd[n, b, i, K - qp + kp_j] += d_s_j, 0 in the other columns;   d_ef = sum_j d_s_j * segment_diff_j
// Sums and maxima use 16 lane partials added in a fixed order: the result does not depend on the thread split.

#define EIGEN_USE_THREADS

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
using CPUDevice = Eigen::ThreadPoolDevice;

REGISTER_OP("XlnetAttentionProbs")
    .Input("ac: T")
    .Input("bd: T")
    .Input("ef: T")
    .Input("segment_diff: bool")
    .Input("mask: float")
    .Input("seed: int32")
    .Input("query_pos: int32")
    .Input("key_pos: int32")
    .Output("prob: T")
    .Output("softmax: float")
    .Attr("T: {float, bfloat16}")
    .Attr("has_segment: bool")
    .Attr("has_mask: bool")
    .Attr("has_dropout: bool")
    .Attr("threshold: int")
    .Attr("scale: float")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    })
    .Doc("dropout(softmax(ac + shift(bd) + ef * segment_diff + mask)) over the last axis of [N, B, Q, K].");

REGISTER_OP("XlnetAttentionProbsGrad")
    .Input("d_prob: T")
    .Input("softmax: float")
    .Input("segment_diff: bool")
    .Input("seed: int32")
    .Input("query_pos: int32")
    .Input("key_pos: int32")
    .Input("position_len: int32")
    .Output("d_ac: T")
    .Output("d_bd: T")
    .Output("d_ef: T")
    .Attr("T: {float, bfloat16}")
    .Attr("has_segment: bool")
    .Attr("has_dropout: bool")
    .Attr("threshold: int")
    .Attr("scale: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle rows, d_bd;
      DimensionHandle rlen;
      c->set_output(0, c->input(0));
      TF_RETURN_IF_ERROR(c->Subshape(c->input(0), 0, -1, &rows));
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(6, &rlen));
      TF_RETURN_IF_ERROR(c->Concatenate(rows, c->Vector(rlen), &d_bd));
      c->set_output(1, d_bd);
      c->set_output(2, c->UnknownShape());
      return absl::OkStatus();
    })
    .Doc("Gradient of XlnetAttentionProbs w.r.t. ac, bd and ef.");

// Rows are processed in float32 scratch rows padded to a multiple of 16 (scores padded with -inf, gradients with
// 0, so padding never changes a max or a sum), with simd.h's explicit vectors.
using namespace simd;  // NOLINT: the kernels' vocabulary

// Scores of one row: s = ac + bd + ef * segment + mask over padded scratch (padding -inf); bd holds the row's k
// position scores (already shifted). Returns the row's maximum.
template <typename T>
inline float Scores(const T* ac, const T* bd, const bool* segment, float ef, const float* mask, int64_t k, float* s) {
  const int64_t full = k - k % kWidth;
  VecF vmax = Splat(-INFINITY);
  for (int64_t j = 0; j < full; j += kWidth) {
    VecF v = Load(ac + j) + Load(bd + j);
    if (segment != nullptr) v += ef * LoadFlags(segment + j);
    if (mask != nullptr) v += Load(mask + j);
    Store(s + j, v);
    vmax = Select(v > vmax, v, vmax);
  }
  float row_max = LaneMax(vmax);
  for (int64_t j = full; j < Padded(k); ++j) {
    float v = -INFINITY;
    if (j < k) {
      v = ToFloat(ac[j]) + ToFloat(bd[j]);
      if (segment != nullptr) v += ef * static_cast<float>(segment[j]);
      if (mask != nullptr) v += mask[j];
      row_max = v > row_max ? v : row_max;
    }
    s[j] = v;
  }
  return row_max;
}

// In place over padded s: exp(s - row_max) / sum.
inline void Softmax(float row_max, int64_t kp, float* s) {
  VecF vsum = Splat(0.0f);
  for (int64_t j = 0; j < kp; j += kWidth) {
    const VecF e = ExpNonPositive(Load(s + j) - row_max);
    Store(s + j, e);
    vsum += e;
  }
  const float sum = LaneSum(vsum);
  for (int64_t j = 0; j < kp; j += kWidth) Store(s + j, Load(s + j) / sum);
}

// Scratch of one thread: padded float rows and the hash words.
struct Scratch {
  explicit Scratch(int64_t k, int64_t rlen)
      : s(Padded(k)), factor(Padded(k)), words(Padded(k) / 2 + 2 * kWidth), column(rlen) {}
  std::vector<float> s, factor;
  std::vector<uint32_t> words;
  std::vector<float> column;
};

// The forward pass of one row (see the top of the file). bd: the row's k position scores, contiguous.
template <typename T>
XLNET_INLINE void ForwardRow(const Dropout& d, int64_t e0, const T* ac, const T* bd, const bool* segment, float ef,
                             const float* mask, int64_t k, Scratch* scratch, float* softmax, T* prob) {
  float* s = scratch->s.data();
  const int64_t kp = Padded(k);
  Softmax(Scores(ac, bd, segment, ef, mask, k, s), kp, s);
  StoreRow(s, k, softmax);
  if (d.on) {
    DropoutFactors(d, e0, k, scratch->words.data(), scratch->factor.data());
    for (int64_t j = 0; j < kp; j += kWidth) Store(s + j, Load(s + j) * Load(scratch->factor.data() + j));
  }
  StoreRow(s, k, prob);
}

// The backward pass of one row: d_s into padded scratch s; returns d_ef's sum over the row.
template <typename T>
XLNET_INLINE float BackwardRow(const Dropout& d, int64_t e0, const T* d_prob, const float* softmax,
                               const bool* segment, int64_t k, Scratch* scratch) {
  float* g = scratch->s.data();
  float* p = scratch->factor.data();
  const int64_t kp = Padded(k), full = k - k % kWidth;
  LoadRow(d_prob, k, 0.0f, g);
  if (d.on) {
    DropoutFactors(d, e0, k, scratch->words.data(), p);
    for (int64_t j = 0; j < kp; j += kWidth) Store(g + j, Load(g + j) * Load(p + j));
  }
  LoadRow(softmax, k, 0.0f, p);
  VecF vdot = Splat(0.0f);
  for (int64_t j = 0; j < kp; j += kWidth) vdot += Load(g + j) * Load(p + j);
  const float dot = LaneSum(vdot);
  VecF vseg = Splat(0.0f);
  for (int64_t j = 0; j < kp; j += kWidth) {
    const VecF ds = (Load(g + j) - dot) * Load(p + j);  // TensorFlow's SoftmaxGrad: (g - sum(g p)) p
    Store(g + j, ds);
    if (segment != nullptr && j < full) vseg += ds * LoadFlags(segment + j);
  }
  float seg_sum = LaneSum(vseg);
  if (segment != nullptr)
    for (int64_t j = full; j < k; ++j) seg_sum += g[j] * static_cast<float>(segment[j]);
  return seg_sum;
}

// The bd column of key j in a row whose key coordinate 0 reads column `first`: first + kp_j, clamped.
inline int64_t Column(int64_t first, const int32_t* key_pos, int64_t j, int64_t rlen) {
  return std::clamp<int64_t>(first + (key_pos ? key_pos[j] : j), 0, rlen - 1);
}

// The row loops.
struct Shapes {
  int64_t heads = 0, batch = 0, queries = 0, keys = 0, rlen = 0, mask_batch = 0;
  int64_t rows() const { return heads * batch * queries; }
};

template <typename T>
struct ForwardArgs {
  Shapes shape;
  Dropout dropout;
  const T *ac, *bd;
  const float* ef_f;  // ef in float32, one per row, or null
  const bool* segment;
  const float* mask;
  const int32_t* query_pos;
  const int32_t* key_pos;  // [B, K], or null: consecutive keys
  float* softmax;
  T* prob;
};

template <typename T>
XLNET_INLINE void ForwardRowsImpl(const ForwardArgs<T>& a, int64_t r0, int64_t r1) {
  const Shapes& sh = a.shape;
  const int64_t k = sh.keys, bq = sh.batch * sh.queries;
  Scratch scratch(k, sh.rlen);
  std::vector<T> gathered(k);
  const T *ac = a.ac, *bd = a.bd;
  T* prob = a.prob;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t row = r % bq;  // (b, i)
    const int64_t first = k - static_cast<int64_t>(a.query_pos[row]);  // bd column of key coordinate 0
    const int32_t* key_pos = a.key_pos ? a.key_pos + (row / sh.queries) * k : nullptr;
    const T* bd_row = bd + r * sh.rlen;
    if (key_pos == nullptr && first >= 0 && first + k <= sh.rlen) {  // a contiguous window of the row
      bd_row += first;
    } else {  // keys at their own coordinates, or columns past the table (only keys a mask hides): clamped
      for (int64_t j = 0; j < k; ++j) gathered[j] = bd_row[Column(first, key_pos, j, sh.rlen)];
      bd_row = gathered.data();
    }
    const int64_t mask_row = (sh.mask_batch == 1 ? row % sh.queries : row) * k;
    ForwardRow(a.dropout, r * k, ac + r * k, bd_row, a.segment ? a.segment + row * k : nullptr,
               a.ef_f ? a.ef_f[r] : 0.0f, a.mask ? a.mask + mask_row : nullptr, k, &scratch, a.softmax + r * k,
               prob + r * k);
  }
}

// One overload per score type so that target_clones compiles each for AVX-512, AVX2 and SSE.
XLNET_CLONES void ForwardRows(const ForwardArgs<float>& a, int64_t r0, int64_t r1) { ForwardRowsImpl(a, r0, r1); }
XLNET_CLONES void ForwardRows(const ForwardArgs<Eigen::bfloat16>& a, int64_t r0, int64_t r1) {
  ForwardRowsImpl(a, r0, r1);
}

template <typename T>
struct BackwardArgs {
  Shapes shape;
  Dropout dropout;
  const T* d_prob;
  const float* softmax;
  const bool* segment;
  const int32_t* query_pos;
  const int32_t* key_pos;
  T *d_ac, *d_bd, *d_ef;
};

template <typename T>
XLNET_INLINE void BackwardRowsImpl(const BackwardArgs<T>& a, int64_t r0, int64_t r1) {
  const Shapes& sh = a.shape;
  const int64_t k = sh.keys, bq = sh.batch * sh.queries, rlen = sh.rlen;
  Scratch scratch(k, rlen);
  const T* d_prob = a.d_prob;
  T *d_ac = a.d_ac, *d_bd = a.d_bd, *d_ef = a.d_ef;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t row = r % bq;
    const float seg_sum = BackwardRow(a.dropout, r * k, d_prob + r * k, a.softmax + r * k,
                                      a.segment ? a.segment + row * k : nullptr, k, &scratch);
    if (d_ef != nullptr) d_ef[r] = static_cast<T>(seg_sum);
    const float* ds = scratch.s.data();
    StoreRow(ds, k, d_ac + r * k);
    T* d_bd_row = d_bd + r * rlen;
    const int64_t first = k - static_cast<int64_t>(a.query_pos[row]);
    const int32_t* key_pos = a.key_pos ? a.key_pos + (row / sh.queries) * k : nullptr;
    if (key_pos == nullptr && first >= 0 && first + k <= rlen) {
      std::fill(d_bd_row, d_bd_row + first, T(0.0f));
      StoreRow(ds, k, d_bd_row + first);
      std::fill(d_bd_row + first + k, d_bd_row + rlen, T(0.0f));
    } else {  // a column read by several keys collects their gradients: summed in float32, in key order
      float* column = scratch.column.data();
      std::fill(column, column + rlen, 0.0f);
      for (int64_t j = 0; j < k; ++j) column[Column(first, key_pos, j, rlen)] += ds[j];
      for (int64_t c = 0; c < rlen; ++c) d_bd_row[c] = static_cast<T>(column[c]);
    }
  }
}

XLNET_CLONES void BackwardRows(const BackwardArgs<float>& a, int64_t r0, int64_t r1) { BackwardRowsImpl(a, r0, r1); }
XLNET_CLONES void BackwardRows(const BackwardArgs<Eigen::bfloat16>& a, int64_t r0, int64_t r1) {
  BackwardRowsImpl(a, r0, r1);
}

// Attributes shared by both kernels.
struct Attrs {
  bool has_segment = false;
  Dropout dropout;  // without the hash keys (the call's seed)
};

void ReadAttrs(OpKernelConstruction* ctx, Attrs* p) {
  OP_REQUIRES_OK(ctx, ctx->GetAttr("has_segment", &p->has_segment));
  OP_REQUIRES_OK(ctx, ReadDropoutAttrs(ctx, &p->dropout));
}

std::string ShapeString(const Tensor& t) { return t.shape().DebugString(); }

// Checks the [N, B, Q, K] scores and the inputs shared by both kernels; returns the shapes and the dropout.
void CheckCommon(OpKernelContext* ctx, const char* op, const Attrs& attrs, const Tensor& rows, const Tensor& segment,
                 const Tensor& seed, const Tensor& query_pos, const Tensor& key_pos, Shapes* sh, Dropout* d) {
  OP_REQUIRES(ctx, rows.dims() == 4,
              absl::InvalidArgumentError(absl::StrCat(op, ": scores must be [N, B, Q, K], got ", ShapeString(rows))));
  sh->heads = rows.dim_size(0);
  sh->batch = rows.dim_size(1);
  sh->queries = rows.dim_size(2);
  sh->keys = rows.dim_size(3);
  OP_REQUIRES(ctx, query_pos.dims() == 2 && query_pos.dim_size(0) == sh->batch && query_pos.dim_size(1) == sh->queries,
              absl::InvalidArgumentError(absl::StrCat(op, ": query_pos must be [B, Q] = [", sh->batch, ", ",
                                                      sh->queries, "], got ", ShapeString(query_pos))));
  OP_REQUIRES(ctx, key_pos.NumElements() == 0 ||
                       (key_pos.dims() == 2 && key_pos.dim_size(0) == sh->batch && key_pos.dim_size(1) == sh->keys),
              absl::InvalidArgumentError(absl::StrCat(op, ": key_pos must be [B, K] = [", sh->batch, ", ", sh->keys,
                                                      "] or empty (consecutive keys), got ", ShapeString(key_pos))));
  OP_REQUIRES(ctx, !attrs.has_segment || (segment.dims() == 3 && segment.dim_size(0) == sh->batch &&
                                          segment.dim_size(1) == sh->queries && segment.dim_size(2) == sh->keys),
              absl::InvalidArgumentError(absl::StrCat(op, ": segment_diff must be [B, Q, K] = [", sh->batch, ", ",
                                                      sh->queries, ", ", sh->keys, "], got ",
                                                      ShapeString(segment))));
  *d = attrs.dropout;
  if (d->on) OP_REQUIRES_OK(ctx, ReadDropoutSeed(op, seed, rows.shape(), d));
}

template <typename T>
class AttentionProbsOp : public OpKernel {
 public:
  explicit AttentionProbsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    ReadAttrs(ctx, &attrs_);
    OP_REQUIRES_OK(ctx, ctx->GetAttr("has_mask", &has_mask_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &ac = ctx->input(0), &bd = ctx->input(1), &ef = ctx->input(2), &segment = ctx->input(3),
                 &mask = ctx->input(4), &seed = ctx->input(5), &query_pos = ctx->input(6),
                 &key_pos = ctx->input(7);
    const char* op = "XlnetAttentionProbs";
    ForwardArgs<T> a;
    CheckCommon(ctx, op, attrs_, ac, segment, seed, query_pos, key_pos, &a.shape, &a.dropout);
    if (!ctx->status().ok()) return;
    Shapes& sh = a.shape;
    OP_REQUIRES(ctx, bd.dims() == 4 && bd.dim_size(0) == sh.heads && bd.dim_size(1) == sh.batch &&
                         bd.dim_size(2) == sh.queries && bd.dim_size(3) >= 1,
                absl::InvalidArgumentError(absl::StrCat(op, ": bd must be [N, B, Q, R] with the scores' ",
                                                        ShapeString(ac), " leading axes, got ", ShapeString(bd))));
    sh.rlen = bd.dim_size(3);
    OP_REQUIRES(ctx, !attrs_.has_segment || ef.NumElements() == sh.rows(),
                absl::InvalidArgumentError(absl::StrCat(op, ": ef must be [N, B, Q, 1], got ", ShapeString(ef))));
    if (has_mask_) {
      OP_REQUIRES(ctx, mask.dims() == 3 && (mask.dim_size(0) == 1 || mask.dim_size(0) == sh.batch) &&
                           mask.dim_size(1) == sh.queries && mask.dim_size(2) == sh.keys,
                  absl::InvalidArgumentError(absl::StrCat(op, ": mask must be [1 or B, Q, K] = [", sh.batch, ", ",
                                                          sh.queries, ", ", sh.keys, "], got ", ShapeString(mask))));
      sh.mask_batch = mask.dim_size(0);
    }
    Tensor *prob = nullptr, *softmax = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ac.shape(), &prob));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ac.shape(), &softmax));
    std::vector<float> ef_f;
    if (attrs_.has_segment) {
      const auto e = ef.flat<T>();
      ef_f.resize(sh.rows());
      for (int64_t r = 0; r < sh.rows(); ++r) ef_f[r] = ToFloat(e(r));
    }
    a.ac = ac.flat<T>().data();
    a.bd = bd.flat<T>().data();
    a.ef_f = attrs_.has_segment ? ef_f.data() : nullptr;
    a.segment = attrs_.has_segment ? segment.flat<bool>().data() : nullptr;
    a.mask = has_mask_ ? mask.flat<float>().data() : nullptr;
    a.query_pos = query_pos.flat<int32_t>().data();
    a.key_pos = key_pos.NumElements() ? key_pos.flat<int32_t>().data() : nullptr;
    a.softmax = softmax->flat<float>().data();
    a.prob = prob->flat<T>().data();
    const int64_t k = sh.keys;
    const Eigen::TensorOpCost cost(k * (3 * sizeof(T) + 4), k * (sizeof(T) + 4), k * 30);
    ctx->eigen_device<CPUDevice>().parallelFor(sh.rows(), cost, [&](Eigen::Index r0, Eigen::Index r1) {
      ForwardRows(a, r0, r1);
    });
  }

 private:
  Attrs attrs_;
  bool has_mask_ = false;
};

template <typename T>
class AttentionProbsGradOp : public OpKernel {
 public:
  explicit AttentionProbsGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) { ReadAttrs(ctx, &attrs_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor &d_prob = ctx->input(0), &softmax = ctx->input(1), &segment = ctx->input(2),
                 &seed = ctx->input(3), &query_pos = ctx->input(4), &key_pos = ctx->input(5),
                 &position_len = ctx->input(6);
    const char* op = "XlnetAttentionProbsGrad";
    BackwardArgs<T> a;
    CheckCommon(ctx, op, attrs_, d_prob, segment, seed, query_pos, key_pos, &a.shape, &a.dropout);
    if (!ctx->status().ok()) return;
    Shapes& sh = a.shape;
    OP_REQUIRES(ctx, softmax.shape() == d_prob.shape(),
                absl::InvalidArgumentError(absl::StrCat(op, ": softmax must be shaped like d_prob ",
                                                        ShapeString(d_prob), ", got ", ShapeString(softmax))));
    OP_REQUIRES(ctx, position_len.dims() == 0 && position_len.scalar<int32_t>()() >= 1,
                absl::InvalidArgumentError(absl::StrCat(op, ": position_len must be a positive scalar")));
    sh.rlen = position_len.scalar<int32_t>()();
    Tensor *d_ac = nullptr, *d_bd = nullptr, *d_ef = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, d_prob.shape(), &d_ac));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            1, ::tensorflow::TensorShape({sh.heads, sh.batch, sh.queries, sh.rlen}), &d_bd));
    const ::tensorflow::TensorShape ef_shape =
        attrs_.has_segment ? ::tensorflow::TensorShape({sh.heads, sh.batch, sh.queries, 1})
                           : ::tensorflow::TensorShape({0});
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, ef_shape, &d_ef));
    a.d_prob = d_prob.flat<T>().data();
    a.softmax = softmax.flat<float>().data();
    a.segment = attrs_.has_segment ? segment.flat<bool>().data() : nullptr;
    a.query_pos = query_pos.flat<int32_t>().data();
    a.key_pos = key_pos.NumElements() ? key_pos.flat<int32_t>().data() : nullptr;
    a.d_ac = d_ac->flat<T>().data();
    a.d_bd = d_bd->flat<T>().data();
    a.d_ef = attrs_.has_segment ? d_ef->flat<T>().data() : nullptr;
    const int64_t k = sh.keys;
    const Eigen::TensorOpCost cost(k * (sizeof(T) + 4), (k + sh.rlen) * sizeof(T), k * 20 + sh.rlen);
    ctx->eigen_device<CPUDevice>().parallelFor(sh.rows(), cost, [&](Eigen::Index r0, Eigen::Index r1) {
      BackwardRows(a, r0, r1);
    });
  }

 private:
  Attrs attrs_;
};

#define REGISTER(T)                                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("XlnetAttentionProbs").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),             \
      AttentionProbsOp<T>);                                                                            \
  REGISTER_KERNEL_BUILDER(                                                                             \
      Name("XlnetAttentionProbsGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),         \
      AttentionProbsGradOp<T>);
REGISTER(float)
REGISTER(Eigen::bfloat16)
#undef REGISTER

}  // namespace
}  // namespace xlnet_tf
