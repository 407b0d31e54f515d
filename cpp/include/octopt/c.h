/* octopt's stable C ABI: the core's optimizers, state files and block-wise quantization for any language
 * that can call C (C, C++, C# P/Invoke, Rust, Julia, Go, Python ctypes). Guide: docs/c.md.
 *
 * Rules that keep it stable (docs/c.md, "ABI rules"):
 *  - C99 only: no C++ type and no exception crosses it; every function is `extern "C"` and noexcept.
 *  - Objects are opaque handles (octopt_optimizer*) created and destroyed by the library.
 *  - Arguments are scalars, strings and pointers to arrays; no struct is passed, so no layout can change.
 *  - Every fallible function returns an int status (OCTOPT_OK = 0); octopt_last_error() then holds a
 *    message for this thread that names the function, the argument and the problem, in the same words
 *    as the Python layer's exception for the same mistake.
 *  - Optimizers and hyper-parameters are named by strings from the core's optimizer table
 *    ("adam", "lr", "betas[0]", "bits", ...), so a new optimizer or key needs no new function.
 *  - OCTOPT_C_ABI_VERSION grows only when a function's meaning or signature changes; new functions may
 *    be added without a change. octopt_abi_version() says what the loaded library implements.
 */
#ifndef OCTOPT_C_H
#define OCTOPT_C_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#if defined(OCTOPT_C_BUILDING)
#define OCTOPT_C_API __declspec(dllexport)
#else
#define OCTOPT_C_API __declspec(dllimport)
#endif
#else
#define OCTOPT_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define OCTOPT_C_ABI_VERSION 1

/* Status codes. Each maps to the exception the Python layer raises for the same mistake. */
#define OCTOPT_OK 0
#define OCTOPT_ERR_VALUE 1  /* ValueError: a bad value, size, option or hyper-parameter */
#define OCTOPT_ERR_TYPE 2   /* TypeError: a wrong dtype code or an unknown option */
#define OCTOPT_ERR_FORMAT 3 /* octopt.StateFileError: a corrupt, truncated or foreign state file */
#define OCTOPT_ERR_FILE 4   /* OSError: the file system refused (missing file, permissions) */
#define OCTOPT_ERR_STATE 5  /* RuntimeError: not possible now (e.g. CUDA not built, in use elsewhere) */
#define OCTOPT_ERR_MEMORY 6 /* MemoryError: an allocation failed */
#define OCTOPT_ERR_NULL 7   /* a required pointer argument was NULL (no Python equivalent) */

/* Element types of parameters, gradients and (de)quantized values: the core's DType codes. */
#define OCTOPT_FLOAT32 0
#define OCTOPT_FLOAT16 1
#define OCTOPT_BFLOAT16 2

/* Where memory lives: OCTOPT_CPU, or the ordinal (>= 0) of a CUDA device. */
#define OCTOPT_CPU (-1)

/* ---- library ------------------------------------------------------------------------------------ */

/* The ABI version this library implements (OCTOPT_C_ABI_VERSION of the header it was built with). */
OCTOPT_C_API int octopt_abi_version(void);
/* The library's version, "0.1.0". Static storage. */
OCTOPT_C_API const char* octopt_version(void);
/* The message of this thread's last failed call ("" when none yet). Valid until this thread's next call. */
OCTOPT_C_API const char* octopt_last_error(void);
/* 1 when the library was built with CUDA kernels, 0 otherwise. */
OCTOPT_C_API int octopt_cuda_built(void);

/* ---- the optimizer table ------------------------------------------------------------------------ */

/* Optimizers: count, then names ("adam") and class names ("Adam") by index; NULL out of range. */
OCTOPT_C_API int octopt_optimizer_count(void);
OCTOPT_C_API const char* octopt_optimizer_name(int index);
OCTOPT_C_API const char* octopt_optimizer_class_name(int index);
/* Hyper-parameter keys of octopt_set / octopt_group_set ("lr", "betas[0]", ...); NULL out of range. */
OCTOPT_C_API int octopt_hparam_count(void);
OCTOPT_C_API const char* octopt_hparam_key(int index);
/* The default of `key` for optimizer `name` (any key octopt_set takes). */
OCTOPT_C_API int octopt_default(const char* name, const char* key, double* value);

/* ---- optimizers --------------------------------------------------------------------------------- */

typedef struct octopt_optimizer octopt_optimizer; /* opaque */

/* A new optimizer of the table's entry `name` ("adam", "adamw", ..., case-insensitive), with the
 * table's defaults and no parameters. *out receives the handle (NULL on failure). */
OCTOPT_C_API int octopt_optimizer_create(const char* name, octopt_optimizer** out);
/* Frees the optimizer and its state (not the parameters, which the caller owns). NULL is ignored. */
OCTOPT_C_API void octopt_optimizer_destroy(octopt_optimizer* opt);

/* Sets an option for the groups added from now on, or for the whole optimizer, by key:
 *  - hyper-parameters of the table (octopt_hparam_key): "lr", "betas[0]", "betas[1]", "betas[2]",
 *    "eps", "weight_decay", "momentum", ...; flags take 0 or 1, optional numbers 0 for "off";
 *  - layout: "bits" (32, 8, 4), "block_size" (0: automatic), "min_8bit_size", "first_moment_bits"
 *    (0: as bits), "initial_accumulator_value";
 *  - the whole optimizer (before the first group): "seed", "stochastic_rounding" (-1: 4-bit states
 *    only, 0, 1), "stochastic_bf16", "percentile", "strict".
 * Ranges are checked when a group is added, as Python checks a constructor's options (an unknown key,
 * a layout option that is no integer and the whole-optimizer options are refused at once). */
OCTOPT_C_API int octopt_set(octopt_optimizer* opt, const char* key, double value);
/* String options: "state_map" ("dynamic" or "fp8"). */
OCTOPT_C_API int octopt_set_string(octopt_optimizer* opt, const char* key, const char* value);
/* Adds a param group with the current options (validated now); *group receives its index (may be NULL).
 * octopt_add_param on an optimizer without groups adds group 0 first. */
OCTOPT_C_API int octopt_add_group(octopt_optimizer* opt, int* group);
/* Registers a parameter of `ndim` dimensions `shape` (ndim 0: a scalar) and dtype, at `data` on
 * `device` (OCTOPT_CPU or a CUDA ordinal; all parameters on one device), in `group`. The memory is
 * the caller's, must stay valid while the optimizer lives and is updated in place by octopt_step.
 * *index receives the parameter's index (may be NULL). */
OCTOPT_C_API int octopt_add_param(octopt_optimizer* opt, int group, void* data, int dtype, const int64_t* shape,
                                  int ndim, int device, size_t* index);
/* Changes a hyper-parameter of an existing group (a learning-rate schedule); checked at the next
 * step or save, as Python checks param_groups. Layout keys cannot change. */
OCTOPT_C_API int octopt_group_set(octopt_optimizer* opt, int group, const char* key, double value);
OCTOPT_C_API int octopt_group_get(const octopt_optimizer* opt, int group, const char* key, double* value);

/* One step of every parameter: grads[i] is the gradient of parameter i (its dtype or float32, as many
 * elements, same device) or NULL to leave it unchanged; grad_dtypes may be NULL (every gradient has
 * its parameter's dtype). n_grads must equal the number of parameters. CPU: *skipped_blocks (may be
 * NULL) receives the blocks left unchanged because their gradient held NaN/Inf. CUDA: the step is
 * enqueued on `stream` (a cudaStream_t; NULL: the legacy default stream) and *skipped_blocks is -1. */
OCTOPT_C_API int octopt_step(octopt_optimizer* opt, const void* const* grads, const int* grad_dtypes, size_t n_grads,
                             void* stream, int64_t* skipped_blocks);

/* State files (docs/format.md section 5), the same files as Python's Optimizer.save / load. */
OCTOPT_C_API int octopt_save(octopt_optimizer* opt, const char* path);
OCTOPT_C_API int octopt_load(octopt_optimizer* opt, const char* path);

/* Introspection. */
OCTOPT_C_API int octopt_state_bytes(const octopt_optimizer* opt, size_t* bytes);
OCTOPT_C_API int octopt_num_params(const octopt_optimizer* opt, size_t* count);
OCTOPT_C_API int octopt_num_groups(const octopt_optimizer* opt, int* count);
OCTOPT_C_API int octopt_global_step(octopt_optimizer* opt, int64_t* step);
OCTOPT_C_API int octopt_param_step(octopt_optimizer* opt, size_t param, int64_t* step);
/* The used state slots of a parameter, and each slot's buffers as the core laid them out: `name`
 * ("exp_avg"), bits (32, 8, 4), block size, `data` (float32 values or uint8 codes, `count` elements)
 * and `absmax` (`blocks` floats; NULL for 32-bit slots). Pointers stay valid while the optimizer
 * lives; they point to device memory for CUDA parameters. Any output pointer may be NULL. */
OCTOPT_C_API int octopt_param_slot_count(const octopt_optimizer* opt, size_t param, int* count);
OCTOPT_C_API int octopt_param_slot(const octopt_optimizer* opt, size_t param, int slot, const char** name, int* bits,
                                   int* block_size, void** data, size_t* count, float** absmax, size_t* blocks);

/* ---- quantization maps (2^bits ascending float32 values in [-1, 1]) ------------------------------ */
/* Each writes 2^bits values into out, which holds out_len >= 2^bits floats. */
OCTOPT_C_API int octopt_dynamic_map(int is_signed, int bits, float* out, size_t out_len);
OCTOPT_C_API int octopt_linear_map(int is_signed, int bits, float* out, size_t out_len);
OCTOPT_C_API int octopt_log2_map(int bits, double step, float* out, size_t out_len);
OCTOPT_C_API int octopt_fp8_map(float* out, size_t out_len);
OCTOPT_C_API int octopt_quantile_map(const float* x, int64_t n, int bits, float* out, size_t out_len);

/* ---- block-wise quantization (functional) ------------------------------------------------------- */
/* qmap: qmap_len values, or NULL for the signed dynamic map of `bits`. rounding: 0 nearest,
 * 1 stochastic. codes: n bytes (8 bits) or (n + 1) / 2 (4 bits); absmax: ceil(n / block_size) floats.
 * device: OCTOPT_CPU or a CUDA ordinal (all pointers there), enqueued on `stream`. CPU: a block with
 * NaN/Inf input is an OCTOPT_ERR_VALUE error after the outputs were written, as in Python. */
OCTOPT_C_API int octopt_quantize_blockwise(const void* x, int dtype, int64_t n, const float* qmap, int64_t qmap_len,
                                           int block_size, int bits, int rounding, uint64_t seed, uint8_t* codes,
                                           float* absmax, int device, void* stream);
OCTOPT_C_API int octopt_dequantize_blockwise(const uint8_t* codes, const float* absmax, int64_t n, const float* qmap,
                                             int64_t qmap_len, int block_size, int bits, int out_dtype, void* out,
                                             int device, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OCTOPT_C_H */
