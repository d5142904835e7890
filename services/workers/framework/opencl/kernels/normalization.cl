/* Softmax and local response normalisation. */

/* x viewed as [outer][len][inner]: softmax along len; global (inner rounded up, outer). */
__kernel void softmax(__global const float* restrict x, __global float* restrict y, int len,
                      int inner) {
  int j = get_global_id(0);
  int o = get_global_id(1);
  if (j >= inner) return;
  size_t base = (size_t)o * len * inner + j;
  float top = -INFINITY;
  for (int i = 0; i < len; ++i) {
    float v = x[base + (size_t)i * inner];
    top = v > top ? v : top;
  }
  float total = 0.0f;
  for (int i = 0; i < len; ++i) {
    float e = exp(x[base + (size_t)i * inner] - top);
    y[base + (size_t)i * inner] = e;
    total += e;
  }
  float scale = 1.0f / total;
  for (int i = 0; i < len; ++i) y[base + (size_t)i * inner] *= scale;
}

/* ONNX LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the window)^beta,
 * the window spanning channels [c - (size-1)/2, c + size/2]; global (inner rounded up, C, N). */
__kernel void lrn(__global const float* restrict x, __global float* restrict y, int C,
                  int inner, int size, float alpha, float beta, float bias) {
  int j = get_global_id(0);
  int c = get_global_id(1);
  int n = get_global_id(2);
  if (j >= inner) return;
  int lo = c - (size - 1) / 2, hi = c + size / 2;
  lo = lo > 0 ? lo : 0;
  hi = hi < C - 1 ? hi : C - 1;
  __global const float* column = x + (size_t)n * C * inner + j;
  float sum = 0.0f;
  for (int k = lo; k <= hi; ++k) {
    float v = column[(size_t)k * inner];
    sum += v * v;
  }
  size_t o = ((size_t)n * C + c) * inner + j;
  y[o] = x[o] / pow(bias + alpha / (float)size * sum, beta);
}
