/* Moving data between layouts: Concat and Transpose. (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity and Dropout move nothing: their output shares its input's buffer.) */

/* One input of a Concat: x viewed as [rows][len] lands at column offset of y viewed as
 * [rows][out_len]; global (len rounded up, rows). */
__kernel void copy_into(__global const float* restrict x, __global float* restrict y, int len,
                        int out_len, int offset) {
  int i = get_global_id(0);
  int r = get_global_id(1);
  if (i < len) y[(size_t)r * out_len + offset + i] = x[(size_t)r * len + i];
}

/* layout: the output's dimensions, then the input's element strides in output order, each
 * right-aligned to 6 dimensions. */
__kernel void transpose(__global const float* restrict x, __global float* restrict y,
                        __global const int* restrict layout, int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  int from = 0, rest = i;
  for (int d = 5; d >= 0; --d) {
    int extent = layout[d];
    int q = rest / extent;
    from += (rest - q * extent) * layout[6 + d];
    rest = q;
  }
  y[i] = x[from];
}
