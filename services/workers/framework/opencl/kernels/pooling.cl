/* 2-D pooling, NCHW; one output per work-item, global (OH*OW rounded up, C, N). Padding
 * begins at (PH, PW); where it ends is already in OH and OW (ceil_mode included). */

__kernel void max_pool(__global const float* restrict x, __global float* restrict y, int C,
                       int H, int W, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
                       int PW, int DH, int DW) {
  int p = get_global_id(0);
  int c = get_global_id(1);
  int n = get_global_id(2);
  if (p >= OH * OW) return;
  int oh = p / OW, ow = p - (p / OW) * OW;
  __global const float* plane = x + (size_t)(n * C + c) * H * W;
  float best = -INFINITY;
  for (int kh = 0; kh < KH; ++kh) {
    int ih = oh * SH - PH + kh * DH;
    if (ih < 0 || ih >= H) continue;
    for (int kw = 0; kw < KW; ++kw) {
      int iw = ow * SW - PW + kw * DW;
      if (iw < 0 || iw >= W) continue;
      float v = plane[ih * W + iw];
      best = v > best ? v : best;
    }
  }
  y[(size_t)(n * C + c) * OH * OW + p] = best;
}

/* count_include_pad: divide by the whole window (padding counts as zeros), else by the number
 * of input elements it covers. Either way the window is clipped to the padded input. */
__kernel void avg_pool(__global const float* restrict x, __global float* restrict y, int C,
                       int H, int W, int OH, int OW, int KH, int KW, int SH, int SW, int PH,
                       int PW, int PH_END, int PW_END, int count_include_pad) {
  int p = get_global_id(0);
  int c = get_global_id(1);
  int n = get_global_id(2);
  if (p >= OH * OW) return;
  int oh = p / OW, ow = p - (p / OW) * OW;
  __global const float* plane = x + (size_t)(n * C + c) * H * W;
  int h0 = oh * SH - PH, w0 = ow * SW - PW;
  int h1 = h0 + KH < H + PH_END ? h0 + KH : H + PH_END;
  int w1 = w0 + KW < W + PW_END ? w0 + KW : W + PW_END;
  int padded = (h1 - h0) * (w1 - w0);
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < H ? h1 : H;
  w1 = w1 < W ? w1 : W;
  float sum = 0.0f;
  for (int ih = h0; ih < h1; ++ih)
    for (int iw = w0; iw < w1; ++iw) sum += plane[ih * W + iw];
  int count = count_include_pad ? padded : (h1 - h0) * (w1 - w0);
  y[(size_t)(n * C + c) * OH * OW + p] = sum / (float)count;
}

/* global: (N*C rounded up); the mean of each plane. */
__kernel void global_avg_pool(__global const float* restrict x, __global float* restrict y,
                              int planes, int size) {
  int i = get_global_id(0);
  if (i >= planes) return;
  __global const float* plane = x + (size_t)i * size;
  float sum = 0.0f;
  for (int j = 0; j < size; ++j) sum += plane[j];
  y[i] = sum / (float)size;
}
