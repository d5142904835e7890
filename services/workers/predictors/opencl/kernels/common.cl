/* Shared by every kernel file. The files are concatenated into one program, this one first:
 * an FPGA board's precompiled binary holds exactly one program.
 *
 * Hot loops use operators, never OpenCL builtins (fma, fmax, vload16, min): the PoCL build
 * dlscope ships calls builtins out of line, and a call per element costs more than the
 * arithmetic. Vector loads and stores go through the under-aligned types below instead of
 * vload/vstore, and "a * b + c" becomes an FMA under -cl-mad-enable. */

/* 16 floats at any 4-byte boundary: tiles start wherever a row's tail puts them. */
typedef float16 float16u __attribute__((aligned(4)));

#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_CLIP 2       /* a = min, b = max */
#define ACT_LEAKY_RELU 3 /* a = alpha */
#define ACT_SIGMOID 4

inline float activate(float x, int act, float a, float b) {
  if (act == ACT_RELU) return x > 0.0f ? x : 0.0f;
  if (act == ACT_CLIP) return x < a ? a : (x > b ? b : x);
  if (act == ACT_LEAKY_RELU) return x >= 0.0f ? x : x * a;
  if (act == ACT_SIGMOID) return 1.0f / (1.0f + exp(-x));
  return x;
}

inline float16 activate16(float16 x, int act, float a, float b) {
  if (act == ACT_RELU) return x > 0.0f ? x : (float16)0.0f;
  if (act == ACT_CLIP) return x < a ? (float16)a : (x > b ? (float16)b : x);
  if (act == ACT_LEAKY_RELU) return x >= 0.0f ? x : x * a;
  if (act == ACT_SIGMOID) return 1.0f / (1.0f + exp(-x));
  return x;
}

inline float sum16(float16 v) {
  float8 h = v.lo + v.hi;
  float4 q = h.lo + h.hi;
  float2 d = q.lo + q.hi;
  return d.x + d.y;
}
