/* Matrix products.
 *
 * dense: y[r][m] = act(bias[m] + sum_k x[r][k] * w[m][k]) -- Gemm and MatMul by a constant
 * (fully connected layers). Batches are small (rows = batch), so the weights are streamed once
 * per 4 rows: each work-item computes 4 outputs x 4 rows, TP k (one vector) at a time. Rows
 * and outputs past the end are clamped (computed twice, stored once).
 *
 * matmul: the general batched product of two run-time tensors, one output per work-item; the
 * element offsets of each batch's operands come from a table (numpy broadcasting of the batch
 * dimensions is resolved by lowering). */

#define DOT4(acc, xr)                                              \
  acc##0 += xr * w0; acc##1 += xr * w1; acc##2 += xr * w2; acc##3 += xr * w3;

__kernel void dense(__global const float* restrict x, __global const float* restrict w,
                    __global const float* restrict bias, __global float* restrict y, int R,
                    int M, int K, int act, float a0, float a1) {
  int m0 = get_global_id(0) * 4;
  int r0 = get_global_id(1) * 4;
  int mi[4], ri[4];
  for (int i = 0; i < 4; ++i) {
    mi[i] = m0 + i < M ? m0 + i : M - 1;
    ri[i] = r0 + i < R ? r0 + i : R - 1;
  }
  __global const float* w0p = w + (size_t)mi[0] * K;
  __global const float* w1p = w + (size_t)mi[1] * K;
  __global const float* w2p = w + (size_t)mi[2] * K;
  __global const float* w3p = w + (size_t)mi[3] * K;
  __global const float* x0p = x + (size_t)ri[0] * K;
  __global const float* x1p = x + (size_t)ri[1] * K;
  __global const float* x2p = x + (size_t)ri[2] * K;
  __global const float* x3p = x + (size_t)ri[3] * K;
  floatv a0_0 = 0.0f, a0_1 = 0.0f, a0_2 = 0.0f, a0_3 = 0.0f;
  floatv a1_0 = 0.0f, a1_1 = 0.0f, a1_2 = 0.0f, a1_3 = 0.0f;
  floatv a2_0 = 0.0f, a2_1 = 0.0f, a2_2 = 0.0f, a2_3 = 0.0f;
  floatv a3_0 = 0.0f, a3_1 = 0.0f, a3_2 = 0.0f, a3_3 = 0.0f;
  int k = 0;
  for (; k + TP <= K; k += TP) {
    floatv w0 = *(__global const floatvu*)(w0p + k);
    floatv w1 = *(__global const floatvu*)(w1p + k);
    floatv w2 = *(__global const floatvu*)(w2p + k);
    floatv w3 = *(__global const floatvu*)(w3p + k);
    floatv xr = *(__global const floatvu*)(x0p + k);
    DOT4(a0_, xr)
    xr = *(__global const floatvu*)(x1p + k);
    DOT4(a1_, xr)
    xr = *(__global const floatvu*)(x2p + k);
    DOT4(a2_, xr)
    xr = *(__global const floatvu*)(x3p + k);
    DOT4(a3_, xr)
  }
  float s[4][4] = {{SUMV(a0_0), SUMV(a0_1), SUMV(a0_2), SUMV(a0_3)},
                   {SUMV(a1_0), SUMV(a1_1), SUMV(a1_2), SUMV(a1_3)},
                   {SUMV(a2_0), SUMV(a2_1), SUMV(a2_2), SUMV(a2_3)},
                   {SUMV(a3_0), SUMV(a3_1), SUMV(a3_2), SUMV(a3_3)}};
  for (; k < K; ++k) {
    for (int r = 0; r < 4; ++r) {
      float xv = x[(size_t)ri[r] * K + k];
      for (int m = 0; m < 4; ++m) s[r][m] += xv * w[(size_t)mi[m] * K + k];
    }
  }
  for (int r = 0; r < 4; ++r) {
    if (r0 + r >= R) break;
    for (int m = 0; m < 4; ++m) {
      if (m0 + m >= M) break;
      float v = s[r][m] + (bias ? bias[m0 + m] : 0.0f);
      y[(size_t)(r0 + r) * M + m0 + m] = activate(v, act, a0, a1);
    }
  }
}

/* global: (N rounded up, M, batch). Element (i, k) of a batch's a is at
 * a[offsets[2*batch] + i*a_row + k*a_col], element (k, j) of its b at
 * b[offsets[2*batch+1] + k*b_row + j*b_col]: transposed operands (Gemm's transA, transB) are
 * read in place. y is [batch][M][N]. */
__kernel void matmul(__global const float* restrict a, __global const float* restrict b,
                     __global const int* restrict offsets, __global float* restrict y, int M,
                     int N, int K, int a_row, int a_col, int b_row, int b_col, float alpha) {
  int j = get_global_id(0);
  int i = get_global_id(1);
  int batch = get_global_id(2);
  if (j >= N) return;
  __global const float* ar = a + offsets[2 * batch] + (size_t)i * a_row;
  __global const float* bc = b + offsets[2 * batch + 1] + (size_t)j * b_col;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += ar[(size_t)k * a_col] * bc[(size_t)k * b_row];
  y[((size_t)batch * M + i) * N + j] = alpha * acc;
}
