"""Pure-NumPy reference forward pass of the ORIGINAL XLNet (test oracle).

This module is a literal NumPy transcription of ``modeling.py`` from the original
TF1 implementation (github.com/zihangdai/xlnet: ``transformer_xl``,
``rel_multihead_attn``, ``two_stream_rel_attn``, ``rel_attn_core``, ``rel_shift``,
``_create_mask``, ``_cache_mem``, ``relative_positional_encoding``,
``positionwise_ffn``, ``lm_loss``), wired as in ``xlnet.py`` (``attn_type`` is a
parameter here; ``XLNetModel`` hard-codes "bi") and ``function_builder.py`` (LM
head tied to the word embedding).  It is an *independent oracle* for the Keras
implementation, so it deliberately keeps the original's layout and math (time-major
``[len, bsz, ...]`` tensors, the same einsum strings, the ``rel_shift`` reshape
trick, ``score - 1e30 * mask``) instead of any optimised formulation.

Differences from the original, all of them inference-only conveniences:
  * no dropout (is_training=False), float64 by default;
  * the word embedding uses a gather (the original's ``use_tpu=False`` path);
  * the two-stream path is selected by ``target_mapping`` (the original selects it
    with ``inp_q``; with ``target_mapping`` given, ``inp_q`` only acts as a switch);
  * batch-major inputs/outputs, transposed to/from time-major at the boundary.
"""
import numpy as np

_T = 'model/transformer/'


# ---------------------------------------------------------------- primitives
def gelu(x):
  # float(): a NumPy float64 scalar would upcast float32 inputs under NumPy 2 promotion rules
  cdf = 0.5 * (1.0 + np.tanh((float(np.sqrt(2 / np.pi)) * (x + 0.044715 * np.power(x, 3)))))
  return x * cdf


def layer_norm(x, gamma, beta, eps=1e-12):
  """tf.contrib.layers.layer_norm(begin_norm_axis=-1): biased variance, eps 1e-12."""
  mean = np.mean(x, axis=-1, keepdims=True)
  var = np.mean(np.square(x - mean), axis=-1, keepdims=True)
  return gamma * (x - mean) / np.sqrt(var + eps) + beta


def softmax(x, axis):
  e = np.exp(x - np.max(x, axis=axis, keepdims=True))
  return e / np.sum(e, axis=axis, keepdims=True)


def dense(x, kernel, bias):  # tf.layers.dense on a rank-3 input (tensordot)
  return np.tensordot(x, kernel, axes=[[-1], [0]]) + bias


def positional_embedding(pos_seq, inv_freq, bsz=None):
  sinusoid_inp = np.einsum('i,d->id', pos_seq, inv_freq)
  pos_emb = np.concatenate([np.sin(sinusoid_inp), np.cos(sinusoid_inp)], -1)
  pos_emb = pos_emb[:, None, :]
  if bsz is not None:
    pos_emb = np.tile(pos_emb, [1, bsz, 1])
  return pos_emb


def positionwise_ffn(inp, w, prefix, activation_type='relu'):
  activation = {'relu': lambda t: np.maximum(t, 0), 'gelu': gelu}[activation_type]
  output = activation(dense(inp, w(prefix + 'ff/layer_1/kernel'), w(prefix + 'ff/layer_1/bias')))
  output = dense(output, w(prefix + 'ff/layer_2/kernel'), w(prefix + 'ff/layer_2/bias'))
  return layer_norm(output + inp, w(prefix + 'ff/LayerNorm/gamma'), w(prefix + 'ff/LayerNorm/beta'))


def head_projection(h, proj_weight):
  return np.einsum('ibh,hnd->ibnd', h, proj_weight)


def post_attention(h, attn_vec, w, prefix):
  attn_out = np.einsum('ibnd,hnd->ibh', attn_vec, w(prefix + 'rel_attn/o/kernel'))
  return layer_norm(attn_out + h, w(prefix + 'rel_attn/LayerNorm/gamma'),
                    w(prefix + 'rel_attn/LayerNorm/beta'))


def rel_shift(x, klen=-1):
  """Literal copy of the original's reshape trick (x: [qlen, rlen, bsz, n_head])."""
  x_size = x.shape
  x = np.reshape(x, [x_size[1], x_size[0], x_size[2], x_size[3]])
  x = x[1:]                                                    # tf.slice(x, [1,0,0,0], [-1,...])
  x = np.reshape(x, [x_size[0], x_size[1] - 1, x_size[2], x_size[3]])
  x = x[:, :klen] if klen >= 0 else x                          # tf.slice(x, [0,0,0,0], [-1,klen,...])
  return x


def rel_attn_core(q_head, k_head_h, v_head_h, k_head_r, seg_embed, seg_mat,
                  r_w_bias, r_r_bias, r_s_bias, attn_mask, scale):
  ac = np.einsum('ibnd,jbnd->ijbn', q_head + r_w_bias, k_head_h)
  bd = np.einsum('ibnd,jbnd->ijbn', q_head + r_r_bias, k_head_r)
  bd = rel_shift(bd, klen=ac.shape[1])
  if seg_mat is None:
    ef = 0
  else:
    ef = np.einsum('ibnd,snd->ibns', q_head + r_s_bias, seg_embed)
    ef = np.einsum('ijbs,ibns->ijbn', seg_mat, ef)
  attn_score = (ac + bd + ef) * scale
  if attn_mask is not None:
    attn_score = attn_score - 1e30 * attn_mask
  attn_prob = softmax(attn_score, 1)
  return np.einsum('ijbn,jbnd->ibnd', attn_prob, v_head_h)


def _create_mask(qlen, mlen, dtype, same_length=False):
  """Causal mask (1 = masked). matrix_band_part(0,-1)=triu, (0,0)=diag, (-1,0)=tril."""
  attn_mask = np.ones([qlen, qlen], dtype=dtype)
  mask_u = np.triu(attn_mask)
  mask_dia = np.diag(np.diag(attn_mask))
  attn_mask_pad = np.zeros([qlen, mlen], dtype=dtype)
  ret = np.concatenate([attn_mask_pad, mask_u - mask_dia], 1)
  if same_length:
    mask_l = np.tril(attn_mask)
    ret = np.concatenate([ret[:, :qlen] + mask_l - mask_dia, ret[:, qlen:]], 1)
  return ret


def _cache_mem(curr_out, prev_mem, mem_len, reuse_len=None):
  if mem_len is None or mem_len == 0:
    return None
  if reuse_len is not None and reuse_len > 0:
    curr_out = curr_out[:reuse_len]
  if prev_mem is None:
    new_mem = curr_out[-mem_len:]
  else:
    new_mem = np.concatenate([prev_mem, curr_out], 0)[-mem_len:]
  return new_mem


def relative_positional_encoding(qlen, klen, d_model, clamp_len, attn_type, bi_data,
                                 bsz=None, dtype=np.float64):
  freq_seq = np.arange(0, d_model, 2.0, dtype=dtype)
  inv_freq = 1 / (10000 ** (freq_seq / d_model))
  if attn_type == 'bi':
    beg, end = klen, -qlen
  elif attn_type == 'uni':
    beg, end = klen, -1
  else:
    raise ValueError('Unknown `attn_type` {}.'.format(attn_type))
  if bi_data:
    fwd_pos_seq = np.arange(beg, end, -1.0, dtype=dtype)
    bwd_pos_seq = np.arange(-beg, -end, 1.0, dtype=dtype)
    if clamp_len > 0:
      fwd_pos_seq = np.clip(fwd_pos_seq, -clamp_len, clamp_len)
      bwd_pos_seq = np.clip(bwd_pos_seq, -clamp_len, clamp_len)
    if bsz is not None:
      assert bsz % 2 == 0, 'With bi_data, the batch size should be divisible by 2.'
      fwd_pos_emb = positional_embedding(fwd_pos_seq, inv_freq, bsz // 2)
      bwd_pos_emb = positional_embedding(bwd_pos_seq, inv_freq, bsz // 2)
    else:
      fwd_pos_emb = positional_embedding(fwd_pos_seq, inv_freq)
      bwd_pos_emb = positional_embedding(bwd_pos_seq, inv_freq)
    pos_emb = np.concatenate([fwd_pos_emb, bwd_pos_emb], axis=1)
  else:
    fwd_pos_seq = np.arange(beg, end, -1.0, dtype=dtype)
    if clamp_len > 0:
      fwd_pos_seq = np.clip(fwd_pos_seq, -clamp_len, clamp_len)
    pos_emb = positional_embedding(fwd_pos_seq, inv_freq, bsz)
  return pos_emb


# ---------------------------------------------------------------- network
def transformer_xl(w, cfg, inp_k, seg_id=None, input_mask=None, perm_mask=None,
                   target_mapping=None, mems=None, dtype=np.float64):
  """Time-major `modeling.transformer_xl` (is_training=False). Returns (h, g, new_mems, lookup_table)."""
  n_layer, n_head, d_head = cfg['n_layer'], cfg['n_head'], cfg['d_head']
  d_model, untie_r = cfg['d_model'], cfg['untie_r']
  attn_type = cfg.get('attn_type', 'bi')
  mem_len, reuse_len = cfg.get('mem_len', 0), cfg.get('reuse_len', None)
  scale = 1 / (d_head ** 0.5)

  r_w_bias, r_r_bias = w(_T + 'r_w_bias'), w(_T + 'r_r_bias')
  qlen, bsz = inp_k.shape
  mlen = mems[0].shape[0] if mems is not None else 0
  klen = mlen + qlen

  ##### Attention mask
  if attn_type == 'uni':
    attn_mask = _create_mask(qlen, mlen, dtype, cfg.get('same_length', False))
    attn_mask = attn_mask[:, :, None, None]
  elif attn_type == 'bi':
    attn_mask = None
  else:
    raise ValueError('Unsupported attention type: {}'.format(attn_type))

  if input_mask is not None and perm_mask is not None:
    data_mask = input_mask[None] + perm_mask
  elif input_mask is not None and perm_mask is None:
    data_mask = input_mask[None]
  elif input_mask is None and perm_mask is not None:
    data_mask = perm_mask
  else:
    data_mask = None

  if data_mask is not None:
    mems_mask = np.zeros([data_mask.shape[0], mlen, bsz], dtype=dtype)  # all mems visible
    data_mask = np.concatenate([mems_mask, data_mask], 1)
    if attn_mask is None:
      attn_mask = data_mask[:, :, :, None]
    else:
      attn_mask = attn_mask + data_mask[:, :, :, None]  # TF `+=` broadcasts to a new tensor

  if attn_mask is not None:
    attn_mask = (attn_mask > 0).astype(dtype)

  if attn_mask is not None:
    non_tgt_mask = -np.eye(qlen, dtype=dtype)
    non_tgt_mask = np.concatenate([np.zeros([qlen, mlen], dtype=dtype), non_tgt_mask], axis=-1)
    non_tgt_mask = ((attn_mask + non_tgt_mask[:, :, None, None]) > 0).astype(dtype)
  else:
    non_tgt_mask = None

  ##### Word embedding (+ query stream init from mask_emb)
  lookup_table = w(_T + 'word_embedding/lookup_table')
  output_h = lookup_table[inp_k]
  two_stream = target_mapping is not None
  if two_stream:
    mask_emb = w(_T + 'mask_emb/mask_emb')
    output_g = np.tile(mask_emb, [target_mapping.shape[0], bsz, 1])

  ##### Segment embedding
  if seg_id is not None:
    r_s_bias, seg_embed = w(_T + 'r_s_bias'), w(_T + 'seg_embed')
    mem_pad = np.zeros([mlen, bsz], dtype=seg_id.dtype)
    cat_ids = np.concatenate([mem_pad, seg_id], 0)
    seg_mat = np.logical_not(np.equal(seg_id[:, None], cat_ids[None, :])).astype(np.int32)
    seg_mat = np.eye(2, dtype=dtype)[seg_mat]  # tf.one_hot(seg_mat, 2): [qlen, klen, bsz, 2]
  else:
    seg_mat = None

  ##### Positional encoding
  pos_emb = relative_positional_encoding(qlen, klen, d_model, cfg.get('clamp_len', -1), attn_type,
                                         cfg.get('bi_data', False), bsz=bsz, dtype=dtype)

  ##### Attention layers
  new_mems = []
  if mems is None:
    mems = [None] * n_layer
  for i in range(n_layer):
    new_mems.append(_cache_mem(output_h, mems[i], mem_len, reuse_len))
    if seg_id is None:
      r_s_bias_i, seg_embed_i = None, None
    else:
      r_s_bias_i = r_s_bias if not untie_r else r_s_bias[i]
      seg_embed_i = seg_embed[i]
    r_w_bias_i = r_w_bias if not untie_r else r_w_bias[i]
    r_r_bias_i = r_r_bias if not untie_r else r_r_bias[i]
    p = _T + 'layer_{}/'.format(i)

    # rel_multihead_attn / two_stream_rel_attn (shared q,k,v,r,o + LayerNorm)
    h = output_h
    cat = np.concatenate([mems[i], h], 0) if mems[i] is not None and mems[i].ndim > 1 else h
    k_head_h = head_projection(cat, w(p + 'rel_attn/k/kernel'))
    v_head_h = head_projection(cat, w(p + 'rel_attn/v/kernel'))
    k_head_r = head_projection(pos_emb, w(p + 'rel_attn/r/kernel'))
    q_head_h = head_projection(h, w(p + 'rel_attn/q/kernel'))
    attn_vec_h = rel_attn_core(q_head_h, k_head_h, v_head_h, k_head_r, seg_embed_i, seg_mat,
                               r_w_bias_i, r_r_bias_i, r_s_bias_i, non_tgt_mask, scale)
    output_h = post_attention(h, attn_vec_h, w, p)

    if two_stream:
      g = output_g
      q_head_g = head_projection(g, w(p + 'rel_attn/q/kernel'))
      q_head_g = np.einsum('mbnd,mlb->lbnd', q_head_g, target_mapping)
      attn_vec_g = rel_attn_core(q_head_g, k_head_h, v_head_h, k_head_r, seg_embed_i, seg_mat,
                                 r_w_bias_i, r_r_bias_i, r_s_bias_i, attn_mask, scale)
      attn_vec_g = np.einsum('lbnd,mlb->mbnd', attn_vec_g, target_mapping)
      output_g = post_attention(g, attn_vec_g, w, p)
      output_g = positionwise_ffn(output_g, w, p, cfg['ff_activation'])

    output_h = positionwise_ffn(output_h, w, p, cfg['ff_activation'])

  return output_h, (output_g if two_stream else None), new_mems, lookup_table


def lm_logits(hidden, lookup_table, softmax_b):
  """`modeling.lm_loss` logits with tie_weight=True (function_builder.two_stream_loss)."""
  return np.einsum('ibd,nd->ibn', hidden, lookup_table) + softmax_b


def reference_forward(weights, cfg, input_ids, segment_ids=None, padding_mask=None, perm_mask=None,
                      target_mapping=None, mems=None, dtype=np.float64):
  """Batch-major wrapper around the time-major original. See the module docstring.

  padding_mask: [B,L] 1 = real token (converted to the original input_mask = 1 - padding_mask).
  perm_mask: [B,L,L] 1 = i may NOT attend j.  target_mapping: [B,P,L].  mems: n_layer x [B,M,d].
  Returns dict with 'sequence_output', 'query_output' (two-stream only), 'new_mems' (mem_len > 0),
  'lm_logits' (from g when target_mapping is given, else from h).
  """
  def w(name):
    return np.asarray(weights[name], dtype=dtype)

  tm = lambda x: None if x is None else np.transpose(np.asarray(x, dtype=dtype), (1, 0, 2))
  inp_k = np.asarray(input_ids).T
  seg_id = None if segment_ids is None else np.asarray(segment_ids).T
  input_mask = None if padding_mask is None else (1 - np.asarray(padding_mask, dtype=dtype)).T
  perm = None if perm_mask is None else np.transpose(np.asarray(perm_mask, dtype=dtype), (1, 2, 0))
  tgt = None if target_mapping is None else np.transpose(np.asarray(target_mapping, dtype=dtype), (1, 2, 0))
  mems_t = None if mems is None else [tm(m) for m in mems]

  h, g, new_mems, lookup_table = transformer_xl(w, cfg, inp_k, seg_id, input_mask, perm, tgt, mems_t, dtype)
  out = {'sequence_output': np.transpose(h, (1, 0, 2))}
  hidden = h
  if g is not None:
    out['query_output'] = np.transpose(g, (1, 0, 2))
    hidden = g
  if cfg.get('mem_len', 0):
    out['new_mems'] = [np.transpose(m, (1, 0, 2)) for m in new_mems]
  out['lm_logits'] = np.transpose(lm_logits(hidden, lookup_table, w('model/lm_loss/bias')), (1, 0, 2))
  return out


def random_weights(cfg, seed, scale=0.3):
  """Random weights under the original checkpoint names (LayerNorm gamma ~ 1, beta ~ 0)."""
  rng = np.random.RandomState(seed)
  n_layer, d_model, n_head, d_head, d_inner, n_token = (
      cfg['n_layer'], cfg['d_model'], cfg['n_head'], cfg['d_head'], cfg['d_inner'], cfg['n_token'])
  rnd = lambda *shape: scale * rng.randn(*shape)
  bias_shape = [n_layer, n_head, d_head] if cfg['untie_r'] else [n_head, d_head]
  wts = {
      _T + 'word_embedding/lookup_table': rnd(n_token, d_model),
      _T + 'mask_emb/mask_emb': rnd(1, 1, d_model),
      _T + 'r_w_bias': rnd(*bias_shape),
      _T + 'r_r_bias': rnd(*bias_shape),
      _T + 'r_s_bias': rnd(*bias_shape),
      _T + 'seg_embed': rnd(n_layer, 2, n_head, d_head),
      'model/lm_loss/bias': rnd(n_token),
  }
  for i in range(n_layer):
    p = _T + 'layer_{}/'.format(i)
    for name in ('q', 'k', 'v', 'r', 'o'):
      wts[p + 'rel_attn/{}/kernel'.format(name)] = rnd(d_model, n_head, d_head)
    for ln in ('rel_attn/LayerNorm/', 'ff/LayerNorm/'):
      wts[p + ln + 'gamma'] = 1.0 + 0.1 * rng.randn(d_model)
      wts[p + ln + 'beta'] = 0.1 * rng.randn(d_model)
    wts[p + 'ff/layer_1/kernel'] = rnd(d_model, d_inner)
    wts[p + 'ff/layer_1/bias'] = rnd(d_inner)
    wts[p + 'ff/layer_2/kernel'] = rnd(d_inner, d_model)
    wts[p + 'ff/layer_2/bias'] = rnd(d_model)
  return wts
