/* Convolution, NCHW, as a GEMM per group: y[n][g][m][p] = sum_k w[g][m][k] * col[n][g][k][p],
 * col being the input's im2col (k: input channel, kh, kw; p: output pixel). The weights are
 * packed at load time as [G][ceil(M/16)][K][16] (zero rows past M), so the 16 weights one k
 * of a tile needs lie side by side. Three kernels:
 *
 * - conv_tile: a work-item owns a few adjacent tiles of TP output pixels (TP: the device's
 *   float vector width, see common.cl). It copies each tile's K x TP slice of col into local
 *   memory (the "panel"; on a CPU, a cache-resident scratch per thread), then runs over its
 *   share of the output channels 16 at a time: a 16 x TP register tile, 16 floatv
 *   accumulators, one panel load feeding 16 FMAs whose weights are broadcast from memory. col is never written to global memory, so a batch of
 *   8 costs about 8 times a batch of 1 rather than spilling out of the caches.
 * - conv_gemm (after im2col): the same tile reading col from global memory, for devices
 *   whose local memory cannot hold a panel.
 * - conv_direct: one output per work-item, for what a TP-pixel tile does not fit (depthwise
 *   and narrow groups, fewer than TP output pixels).
 *
 * Bias, a residual input (ResNet's Add/Sum) and the activation are applied in the epilogue,
 * so a fused Conv+Add+Relu writes its output once. A tile that would run past the end of a
 * row (or of the image) is moved back to end there: it overlaps its neighbour, and both
 * write the same values. */

/* The tile below is written out for 16 output channels (c0..c15); tiling.py keeps TM 16. */
#if TM != 16
#error "conv.cl's register tile is written out for DLSCOPE_TM == 16"
#endif

#define STORE(c, r)                                                      \
  if (m0 + r < M) {                                                      \
    size_t o = (ybase + (size_t)(m0 + r)) * P + p0;                      \
    floatv v = c + bias[g * M + m0 + r];                                 \
    if (residual) v += *(__global const floatvu*)(residual + o);         \
    STORE_ACTIVATED(y + o, v, act, a0, a1)                               \
  }

/* The 16 x TP tile of output channels m0.. and pixels p0..: b(k) is the panel row of k. */
#define TILE(b)                                                                           \
  {                                                                                       \
    floatv c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f, c4 = 0.0f, c5 = 0.0f, c6 = 0.0f,  \
            c7 = 0.0f, c8 = 0.0f, c9 = 0.0f, c10 = 0.0f, c11 = 0.0f, c12 = 0.0f,          \
            c13 = 0.0f, c14 = 0.0f, c15 = 0.0f;                                           \
    for (int k = 0; k < K; ++k) {                                                         \
      floatv bv = b(k);                                                                  \
      __global const float* ak = a + k * TM;                                              \
      c0 += ak[0] * bv; c1 += ak[1] * bv; c2 += ak[2] * bv; c3 += ak[3] * bv;             \
      c4 += ak[4] * bv; c5 += ak[5] * bv; c6 += ak[6] * bv; c7 += ak[7] * bv;             \
      c8 += ak[8] * bv; c9 += ak[9] * bv; c10 += ak[10] * bv; c11 += ak[11] * bv;         \
      c12 += ak[12] * bv; c13 += ak[13] * bv; c14 += ak[14] * bv; c15 += ak[15] * bv;     \
    }                                                                                     \
    STORE(c0, 0) STORE(c1, 1) STORE(c2, 2) STORE(c3, 3) STORE(c4, 4) STORE(c5, 5)         \
    STORE(c6, 6) STORE(c7, 7) STORE(c8, 8) STORE(c9, 9) STORE(c10, 10) STORE(c11, 11)     \
    STORE(c12, 12) STORE(c13, 13) STORE(c14, 14) STORE(c15, 15)                           \
  }

#define PANEL_ROW(k) (*(__local const floatv*)(tile_panel + (k) * TP))

/* The first output pixel of tile t: tiles run along output rows when a row holds one
 * (OW >= TP), else over the flattened image (P >= TP). */
inline int tile_start(int t, int OH, int OW) {
  if (OW >= TP) {
    int per_row = (OW + TP - 1) / TP;
    int oh = t / per_row;
    int ow = (t - oh * per_row) * TP;
    return oh * OW + (ow > OW - TP ? OW - TP : ow);
  }
  int P = OH * OW;
  return t * TP > P - TP ? P - TP : t * TP;
}

/* The panel of the TP pixels from p0: row k = (c, kh, kw) holds their im2col values. */
inline void fill_panel(__local float* restrict panel, __global const float* restrict xg,
                       int p0, int C, int H, int W, int OW, int KH, int KW, int SH, int SW,
                       int PH, int PW, int DH, int DW) {
  int oh0 = p0 / OW, ow0 = p0 - (p0 / OW) * OW;
  if (ow0 + TP <= OW && SW == 1) {
    /* The TP pixels of a panel row are TP adjacent inputs: one vector, unless the window
     * hangs over the left or right edge. */
    int k = 0;
    for (int c = 0; c < C; ++c)
      for (int kh = 0; kh < KH; ++kh) {
        int ih = oh0 * SH - PH + kh * DH;
        __global const float* row = xg + ((size_t)c * H + ih) * W;
        for (int kw = 0; kw < KW; ++kw, ++k) {
          __local float* dst = panel + k * TP;
          int iw0 = ow0 - PW + kw * DW;
          if (ih < 0 || ih >= H) {
            *(__local floatv*)dst = (floatv)0.0f;
          } else if (iw0 >= 0 && iw0 + TP <= W) {
            *(__local floatv*)dst = *(__global const floatvu*)(row + iw0);
          } else {
            for (int j = 0; j < TP; ++j) {
              int iw = iw0 + j;
              dst[j] = iw >= 0 && iw < W ? row[iw] : 0.0f;
            }
          }
        }
      }
    return;
  }
  int ihs[TP], iws[TP];
  for (int j = 0; j < TP; ++j) {
    int p = p0 + j;
    ihs[j] = (p / OW) * SH - PH;
    iws[j] = (p - (p / OW) * OW) * SW - PW;
  }
  int k = 0;
  for (int c = 0; c < C; ++c) {
    __global const float* plane = xg + (size_t)c * H * W;
    for (int kh = 0; kh < KH; ++kh)
      for (int kw = 0; kw < KW; ++kw, ++k) {
        __local float* dst = panel + k * TP;
        for (int j = 0; j < TP; ++j) {
          int ih = ihs[j] + kh * DH, iw = iws[j] + kw * DW;
          dst[j] = ih >= 0 && ih < H && iw >= 0 && iw < W ? plane[ih * W + iw] : 0.0f;
        }
      }
  }
}

/* global: (ceil(tiles / S), G * chunks, N), local (1, 1, 1); panel: S * K * TP floats of
 * local memory. A work-item takes S adjacent tiles: it reads S * TP contiguous floats of each
 * input row it needs rather than TP, and uses each block of weights S times while it is in
 * cache. Each of the chunks takes an equal share of the ceil(M/16) channel blocks: more
 * work-items when the image alone has too few tiles to share out. */
__kernel void conv_tile(__global const float* restrict x, __global const float* restrict w,
                        __global const float* restrict bias,
                        __global const float* restrict residual, __global float* restrict y,
                        __local float* restrict panel, int C, int H, int W, int M, int OH,
                        int OW, int KH, int KW, int SH, int SW, int PH, int PW, int DH, int DW,
                        int G, int S, int chunks, int act, float a0, float a1) {
  int item = get_global_id(0);
  int gc = get_global_id(1);
  int n = get_global_id(2);
  int g = gc / chunks, chunk = gc - (gc / chunks) * chunks;
  int K = C * KH * KW;
  int P = OH * OW;
  int tiles = OW >= TP ? OH * ((OW + TP - 1) / TP) : (P + TP - 1) / TP;
  int first = item * S;
  int count = tiles - first < S ? tiles - first : S;
  __global const float* xg = x + ((size_t)n * G + g) * C * H * W;
  for (int s = 0; s < count; ++s)
    fill_panel(panel + s * K * TP, xg, tile_start(first + s, OH, OW), C, H, W, OW, KH, KW, SH,
               SW, PH, PW, DH, DW);

  int MB = (M + TM - 1) / TM;
  int share = (MB + chunks - 1) / chunks;
  int last = (chunk + 1) * share < MB ? (chunk + 1) * share : MB;
  size_t ybase = ((size_t)n * G + g) * M;
  for (int mb = chunk * share; mb < last; ++mb) {
    int m0 = mb * TM;
    __global const float* a = w + (size_t)(g * MB + mb) * K * TM;
    for (int s = 0; s < count; ++s) {
      int p0 = tile_start(first + s, OH, OW);
      __local const float* tile_panel = panel + s * K * TP;
      TILE(PANEL_ROW)
    }
  }
}

/* One row per (input channel, kh, kw), one column per output pixel; zeros where the window
 * covers padding. col is [N][C*KH*KW][OH*OW]; work-item: (output row, k, n). */
__kernel void im2col(__global const float* restrict x, __global float* restrict col,
                     int C, int H, int W, int KH, int KW, int SH, int SW, int PH, int PW,
                     int DH, int DW, int OH, int OW) {
  int oh = get_global_id(0);
  int k = get_global_id(1);
  int n = get_global_id(2);
  int kw = k % KW;
  int kh = (k / KW) % KH;
  int c = k / (KW * KH);
  int ih = oh * SH - PH + kh * DH;
  __global float* out = col + ((size_t)n * C * KH * KW + k) * OH * OW + oh * OW;
  if (ih < 0 || ih >= H) {
    for (int ow = 0; ow < OW; ++ow) out[ow] = 0.0f;
    return;
  }
  __global const float* row = x + ((size_t)(n * C + c) * H + ih) * W;
  int iw = kw * DW - PW;
  for (int ow = 0; ow < OW; ++ow, iw += SW) out[ow] = (iw >= 0 && iw < W) ? row[iw] : 0.0f;
}

#define GLOBAL_ROW(k) (*(__global const floatvu*)(bp + (size_t)(k) * P))

/* global: (G * ceil(M/16), ceil(P/TP), N), local (1, 1, 1); b: the input itself for a 1x1
 * stride-1 convolution, else its im2col. P >= TP. */
__kernel void conv_gemm(__global const float* restrict w, __global const float* restrict b,
                        __global const float* restrict bias,
                        __global const float* restrict residual, __global float* restrict y,
                        int M, int K, int P, int G, int act, float a0, float a1) {
  int mb = get_global_id(0);
  int pt = get_global_id(1);
  int n = get_global_id(2);
  int MB = (M + TM - 1) / TM;
  int g = mb / MB;
  int m0 = (mb - g * MB) * TM;
  int p0 = pt * TP > P - TP ? P - TP : pt * TP;
  __global const float* a = w + (size_t)mb * K * TM;
  __global const float* bp = b + ((size_t)n * G + g) * K * P + p0;
  size_t ybase = ((size_t)n * G + g) * M;
  TILE(GLOBAL_ROW)
}

/* global: (OH*OW rounded up, G*M, N); C and M per group. */
__kernel void conv_direct(__global const float* restrict x, __global const float* restrict w,
                          __global const float* restrict bias,
                          __global const float* restrict residual, __global float* restrict y,
                          int C, int H, int W, int M, int OH, int OW, int KH, int KW, int SH,
                          int SW, int PH, int PW, int DH, int DW, int G, int act, float a0,
                          float a1) {
  int p = get_global_id(0);
  int gm = get_global_id(1);
  int n = get_global_id(2);
  if (p >= OH * OW) return;
  int g = gm / M;
  int m = gm - g * M;
  int oh = p / OW, ow = p - (p / OW) * OW;
  int K = C * KH * KW;
  __global const float* wm = w + ((size_t)(g * ((M + TM - 1) / TM) + m / TM) * K) * TM + m % TM;
  float acc = 0.0f;
  for (int c = 0; c < C; ++c) {
    __global const float* plane = x + (size_t)(n * C * G + g * C + c) * H * W;
    for (int kh = 0; kh < KH; ++kh) {
      int ih = oh * SH - PH + kh * DH;
      if (ih < 0 || ih >= H) continue;
      for (int kw = 0; kw < KW; ++kw) {
        int iw = ow * SW - PW + kw * DW;
        if (iw < 0 || iw >= W) continue;
        acc += plane[ih * W + iw] * wm[((c * KH + kh) * KW + kw) * TM];
      }
    }
  }
  size_t o = ((size_t)n * G * M + gm) * OH * OW + p;
  float v = acc + bias[gm];
  if (residual) v += residual[o];
  y[o] = activate(v, act, a0, a1);
}
