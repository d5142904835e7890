/* Shared by every kernel file. The files are concatenated into one program, this one first:
 * an FPGA board's precompiled binary holds exactly one program.
 *
 * Portability: no vector type crosses a function boundary. PoCL compiles with -Dinline=, so
 * helpers are real calls, and how a float16 (or float8) argument is passed depends on the
 * target's features: PoCL 3.0 on an AMD Zen 4 targets znver3 (no AVX-512) while linking the
 * AVX-512 builtin library, and a float16 helper or builtin call there either leaves the
 * program without kernels or passes its arguments in the wrong registers. Helpers that work
 * on vectors are macros; helpers that are functions take and return scalars and pointers.
 *
 * Hot loops use operators, never OpenCL builtins (fma, fmax, vload16, min): the PoCL build
 * dlscope ships calls builtins out of line, and a call per element costs more than the
 * arithmetic. Vector loads and stores go through the under-aligned types below instead of
 * vload/vstore, and "a * b + c" becomes an FMA under -cl-mad-enable.
 *
 * The host chooses the tile from the device (tiling.py) and defines:
 *   DLSCOPE_TM  output channels per register tile (16: the packed weight layout)
 *   DLSCOPE_TP  output pixels per tile, the float vector width: 4, 8 or 16 */

#ifndef DLSCOPE_TM
#define DLSCOPE_TM 16
#endif
#ifndef DLSCOPE_TP
#define DLSCOPE_TP 16
#endif
#define TM DLSCOPE_TM
#define TP DLSCOPE_TP

#define PASTE_(a, b) a##b
#define PASTE(a, b) PASTE_(a, b)

/* The vector of TP floats, and the same at any 4-byte boundary: tiles start wherever a row's
 * tail puts them. */
typedef PASTE(float, TP) floatv;
typedef floatv floatvu __attribute__((aligned(4)));

/* The sum of a vector's lanes. */
#define SUM2_(v) ((v).s0 + (v).s1)
#define SUM4_(v) SUM2_((v).lo + (v).hi)
#define SUM8_(v) SUM4_((v).lo + (v).hi)
#define SUM16_(v) SUM8_((v).lo + (v).hi)
#define SUMV(v) PASTE(PASTE(SUM, TP), _)(v)

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

/* Store v (a floatv) at p (a __global float*) through the activation. Sigmoid goes lane by
 * lane through the scalar exp: a vector exp is a builtin call with a vector argument. */
#define STORE_ACTIVATED(p, v, act, a, b)                                      \
  {                                                                           \
    floatv v_ = (v);                                                          \
    if ((act) == ACT_RELU) v_ = v_ > 0.0f ? v_ : (floatv)0.0f;                \
    else if ((act) == ACT_CLIP)                                               \
      v_ = v_ < (a) ? (floatv)(a) : (v_ > (b) ? (floatv)(b) : v_);            \
    else if ((act) == ACT_LEAKY_RELU) v_ = v_ >= 0.0f ? v_ : v_ * (a);        \
    *(__global floatvu*)(p) = v_;                                             \
    if ((act) == ACT_SIGMOID)                                                 \
      for (int j_ = 0; j_ < TP; ++j_) (p)[j_] = activate((p)[j_], (act), (a), (b)); \
  }

/* What this program was built with: a host loading a binary built ahead of time asks. */
__kernel void tiling(__global int* out) {
  out[0] = TM;
  out[1] = TP;
}
