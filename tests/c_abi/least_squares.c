/* A C99 program over octopt's C ABI (c.h), run by CTest (tests/c_abi/test_c_program.py): trains a
 * least-squares problem with 8-bit Adam and checks that a run saved and loaded halfway continues bit for
 * bit as the uninterrupted run. Exits 0 when every check holds; prints what failed otherwise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "octopt/c.h"

#define ROWS 256
#define COLS 4097 /* one past a multiple of the block size */
#define HALF 40

static float A[ROWS][COLS];
static float b[ROWS];

static int failures = 0;
#define CHECK(cond, ...)                       \
  do {                                         \
    if (!(cond)) {                             \
      fprintf(stderr, "FAILED %s: ", #cond);   \
      fprintf(stderr, __VA_ARGS__);            \
      fprintf(stderr, "\n");                   \
      ++failures;                              \
    }                                          \
  } while (0)
#define OK(call) CHECK((call) == OCTOPT_OK, "%s", octopt_last_error())

/* A fixed problem from a 64-bit LCG: A in [-1, 1) / sqrt(COLS), b = A * (0.5, 0.5, ...) + noise. */
static void make_problem(void) {
  unsigned long long s = 42;
  for (int i = 0; i < ROWS; ++i) {
    double dot = 0.0;
    for (int j = 0; j < COLS; ++j) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      A[i][j] = (float)(((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0) / sqrt((double)COLS));
      dot += 0.5 * A[i][j];
    }
    b[i] = (float)dot;
  }
}

/* loss = mean((A w - b)^2); grad = 2 A^T (A w - b) / ROWS */
static double loss_and_grad(const float* w, float* grad) {
  static float r[ROWS];
  double loss = 0.0;
  for (int i = 0; i < ROWS; ++i) {
    float acc = -b[i];
    for (int j = 0; j < COLS; ++j) acc += A[i][j] * w[j];
    r[i] = acc;
    loss += (double)acc * acc;
  }
  for (int j = 0; j < COLS; ++j) grad[j] = 0.0f;
  for (int i = 0; i < ROWS; ++i)
    for (int j = 0; j < COLS; ++j) grad[j] += 2.0f * A[i][j] * r[i] / ROWS;
  return loss / ROWS;
}

static octopt_optimizer* make_adam(float* w) {
  octopt_optimizer* opt = NULL;
  const int64_t shape[1] = {COLS};
  OK(octopt_optimizer_create("adam", &opt));
  OK(octopt_set(opt, "lr", 1e-2));
  OK(octopt_set(opt, "bits", 8));
  OK(octopt_add_param(opt, 0, w, OCTOPT_FLOAT32, shape, 1, OCTOPT_CPU, NULL));
  return opt;
}

static double train(octopt_optimizer* opt, float* w, int steps) {
  static float grad[COLS];
  const void* grads[1] = {grad};
  double loss = 0.0;
  for (int t = 0; t < steps; ++t) {
    loss = loss_and_grad(w, grad);
    OK(octopt_step(opt, grads, NULL, 1, NULL, NULL));
  }
  return loss;
}

/* Every byte of every state slot of parameter 0 of a and b is the same. */
static int same_state(const octopt_optimizer* a, const octopt_optimizer* b) {
  int na = 0, nb = 0;
  OK(octopt_param_slot_count(a, 0, &na));
  OK(octopt_param_slot_count(b, 0, &nb));
  if (na != nb) return 0;
  for (int k = 0; k < na; ++k) {
    void *da, *db;
    float *ma, *mb;
    size_t ca, cb, ba, bb;
    int bits;
    OK(octopt_param_slot(a, 0, k, NULL, &bits, NULL, &da, &ca, &ma, &ba));
    OK(octopt_param_slot(b, 0, k, NULL, NULL, NULL, &db, &cb, &mb, &bb));
    if (ca != cb || ba != bb || memcmp(da, db, ca * (bits == 32 ? 4 : 1)) != 0) return 0;
    if (ba && memcmp(ma, mb, ba * sizeof(float)) != 0) return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "least_squares_state.safetensors";
  static float w_full[COLS], w_half[COLS], w_resumed[COLS];
  CHECK(octopt_abi_version() == OCTOPT_C_ABI_VERSION, "the library implements ABI %d", octopt_abi_version());
  make_problem();

  /* the uninterrupted run */
  octopt_optimizer* full = make_adam(w_full);
  static float g0[COLS];
  const double start = loss_and_grad(w_full, g0);
  train(full, w_full, HALF);
  const double end = train(full, w_full, HALF);
  printf("loss %.6f at the start, %.6f after %d steps of 8-bit Adam\n", start, end, 2 * HALF);
  CHECK(end < 0.05 * start, "the loss fell from %g to %g only", start, end);
  int slots = 0, bits = 0;
  OK(octopt_param_slot_count(full, 0, &slots));
  OK(octopt_param_slot(full, 0, 0, NULL, &bits, NULL, NULL, NULL, NULL, NULL));
  CHECK(slots == 2 && bits == 8, "%d slots of %d bits", slots, bits);
  size_t bytes = 0;
  OK(octopt_state_bytes(full, &bytes));
  printf("state bytes %zu for %d parameters\n", bytes, COLS);

  /* half the run, saved; a new optimizer loads it and runs the other half */
  octopt_optimizer* first = make_adam(w_half);
  train(first, w_half, HALF);
  OK(octopt_save(first, path));
  memcpy(w_resumed, w_half, sizeof w_half);
  octopt_optimizer_destroy(first);
  octopt_optimizer* resumed = make_adam(w_resumed);
  OK(octopt_load(resumed, path));
  int64_t step = 0;
  OK(octopt_param_step(resumed, 0, &step));
  CHECK(step == HALF, "the loaded parameter has taken %lld steps", (long long)step);
  train(resumed, w_resumed, HALF);
  CHECK(memcmp(w_full, w_resumed, sizeof w_full) == 0, "the resumed run's parameters differ");
  CHECK(same_state(full, resumed), "the resumed run's state differs");
  printf("save/load: resumed run bit-identical: %s\n", memcmp(w_full, w_resumed, sizeof w_full) ? "no" : "yes");

  /* a mistake is a status and a message, never a crash */
  CHECK(octopt_set(resumed, "lr", NAN) == OCTOPT_OK, "setting a pending option checks later");
  CHECK(octopt_group_set(resumed, 0, "lr", NAN) == OCTOPT_OK, "%s", octopt_last_error());
  static float grad[COLS];
  const void* grads[1] = {grad};
  CHECK(octopt_step(resumed, grads, NULL, 1, NULL, NULL) == OCTOPT_ERR_VALUE, "a NaN learning rate was taken");
  CHECK(strcmp(octopt_last_error(), "step: 'lr' must be finite, got nan") == 0, "message: %s", octopt_last_error());

  octopt_optimizer_destroy(full);
  octopt_optimizer_destroy(resumed);
  remove(path);
  printf("%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
