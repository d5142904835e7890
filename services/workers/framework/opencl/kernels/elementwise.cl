/* Element-wise kernels: one element per work-item, work-groups of 64 so that PoCL vectorises
 * across work-items; the global size is rounded up, hence the bounds checks. */

#define OP_ADD 0
#define OP_SUB 1
#define OP_MUL 2
#define OP_DIV 3

__kernel void unary(__global const float* x, __global float* y, int n, int act, float a0,
                    float a1) {
  int i = get_global_id(0);
  if (i < n) y[i] = activate(x[i], act, a0, a1);
}

/* Numpy broadcasting over up to 6 dimensions. layout holds the output's dimensions, then a's
 * and b's element strides (0 along a broadcast dimension), each right-aligned to 6; when
 * broadcast is 0 both operands have the output's shape and the layout is not read. a may be y
 * (Sum of several inputs accumulates in place), hence no restrict. */
__kernel void binary(__global const float* a, __global const float* b, __global float* y,
                     __global const int* layout, int n, int broadcast, int op, int act,
                     float a0, float a1) {
  int i = get_global_id(0);
  if (i >= n) return;
  int ia = i, ib = i;
  if (broadcast) {
    ia = 0;
    ib = 0;
    int rest = i;
    for (int d = 5; d >= 0; --d) {
      int extent = layout[d];
      int q = rest / extent;
      int index = rest - q * extent;
      rest = q;
      ia += index * layout[6 + d];
      ib += index * layout[12 + d];
    }
  }
  float u = a[ia], v = b[ib], r;
  if (op == OP_ADD) r = u + v;
  else if (op == OP_SUB) r = u - v;
  else if (op == OP_MUL) r = u * v;
  else r = u / v;
  y[i] = activate(r, act, a0, a1);
}

/* y = act(x * scale[c] + shift[c]) over NC...: BatchNormalization in inference mode (and the
 * per-channel Mul/Add folded into it), when no convolution precedes it to absorb it. */
__kernel void channel_affine(__global const float* restrict x, __global const float* restrict scale,
                             __global const float* restrict shift, __global float* restrict y,
                             int n, int C, int inner, int act, float a0, float a1) {
  int i = get_global_id(0);
  if (i >= n) return;
  int c = (i / inner) % C;
  y[i] = activate(x[i] * scale[c] + shift[c], act, a0, a1);
}
