/* mpi_allreduce_bench: the OpenMPI peer of `cohort-bench allreduce`.
 *
 *   mpirun -np 2 mpi_allreduce_bench [--min-bytes 8] [--max-bytes 256M]
 *       [--step-factor 2] [--iters N] [--warmup W] [--seconds S] [--check 0|1]
 *       [--csv]
 *
 * Times MPI_Allreduce (float32, sum, out of place, MPI_COMM_WORLD) over the
 * same size sweep and with the same method as cohort-bench, so that the two
 * tables compare like for like:
 *   - per size: fill the input with cohort-bench's pattern, run once and count
 *     wrong elements (--check 1), then `warmup` untimed calls (default 1; 5
 *     with --iters);
 *   - adaptive iteration count (unless --iters): batches doubling until one
 *     takes 20 ms, then enough calls for about --seconds (default 0.15), in
 *     [5, 100000], rank 0's count broadcast to all;
 *   - barrier, steady clock (CLOCK_MONOTONIC), `iters` calls, clock; the time
 *     reported is the largest over ranks of the mean per call;
 *   - algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests).
 * Output: the same columns as cohort-bench, or with --csv the same CSV.
 * Exit status: 0, 1 on wrong results, 2 on bad flags.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kMinAdaptiveIters = 5, kMaxAdaptiveIters = 100000 };
static const double kCalibrationSeconds = 0.02;

struct options {
  size_t min_bytes, max_bytes, step_factor;
  long long iters, warmup;
  double seconds;
  int check, csv;
};

static int rank_ = 0;

static void usage_error(const char* fmt, const char* a, const char* b) {
  if (rank_ == 0) {
    fprintf(stderr, "mpi_allreduce_bench: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
  }
  MPI_Finalize();
  exit(2);
}

/* "8", "64K", "256M", "1G", "4KiB": K/M/G are powers of 1024. */
static size_t parse_bytes(const char* flag, const char* text) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno == ERANGE || text[0] == '-')
    usage_error("%s expects a byte count such as 8, 64K or 256M, got '%s'", flag, text);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  else if (*end == 'M' || *end == 'm') shift = 20;
  else if (*end == 'G' || *end == 'g') shift = 30;
  if (shift) {
    ++end;
    if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0 || strcmp(end, "i") == 0) end += strlen(end);
  } else if (strcmp(end, "B") == 0) {
    ++end;
  }
  if (*end != '\0') usage_error("%s has an unknown unit in '%s' (use K, M or G)", flag, text);
  if (shift && v > (UINT64_MAX >> shift)) usage_error("%s '%s' is too large", flag, text);
  return (size_t)(v << shift);
}

static long long parse_int(const char* flag, const char* text, long long lo, long long hi) {
  char* end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    usage_error("%s expects an integer in range, got '%s'", flag, text);
  return v;
}

static void parse_args(int argc, char** argv, struct options* o) {
  o->min_bytes = 8;
  o->max_bytes = (size_t)256 << 20;
  o->step_factor = 2;
  o->iters = 0;
  o->warmup = -1;
  o->seconds = 0.15;
  o->check = 1;
  o->csv = 0;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (strcmp(a, "--csv") == 0) {
      o->csv = 1;
      continue;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      if (rank_ == 0)
        printf("usage: mpi_allreduce_bench [--min-bytes B] [--max-bytes B] [--step-factor F] [--iters N]\n"
               "       [--warmup W] [--seconds S] [--check 0|1] [--csv]\n");
      MPI_Finalize();
      exit(0);
    }
    if (i + 1 >= argc) usage_error("%s needs a value%s", a, "");
    const char* v = argv[++i];
    if (strcmp(a, "--min-bytes") == 0) o->min_bytes = parse_bytes(a, v);
    else if (strcmp(a, "--max-bytes") == 0) o->max_bytes = parse_bytes(a, v);
    else if (strcmp(a, "--step-factor") == 0) o->step_factor = (size_t)parse_int(a, v, 2, 1 << 20);
    else if (strcmp(a, "--iters") == 0) o->iters = parse_int(a, v, 1, 1LL << 40);
    else if (strcmp(a, "--warmup") == 0) o->warmup = parse_int(a, v, 0, 1LL << 40);
    else if (strcmp(a, "--check") == 0) o->check = (int)parse_int(a, v, 0, 1);
    else if (strcmp(a, "--seconds") == 0) {
      char* end = NULL;
      o->seconds = strtod(v, &end);
      if (end == v || *end != '\0' || !(o->seconds > 0) || o->seconds > 3600)
        usage_error("%s expects seconds in (0, 3600], got '%s'", a, v);
    } else {
      usage_error("unknown flag '%s'%s", a, "");
    }
  }
  if (o->min_bytes > o->max_bytes) usage_error("--min-bytes exceeds --max-bytes%s%s", "", "");
  if (o->warmup < 0) o->warmup = o->iters > 0 ? 5 : 1;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* cohort-bench's sum pattern for a signed type: small integers in [-4, 4]. */
static float pattern(int rank, size_t i) { return (float)((i * 7 + (size_t)rank * 13) % 9) - 4.0f; }

static const float* send_;
static float* recv_;
static int count_;

static void call(void) { MPI_Allreduce(send_, recv_, count_, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }

/* Seconds for `iters` calls after a barrier, the largest over ranks. */
static double time_calls(long long iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double start = now_seconds();
  for (long long i = 0; i < iters; ++i) call();
  double elapsed = now_seconds() - start;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return elapsed;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  struct options o;
  parse_args(argc, argv, &o);

  size_t max_count = o.max_bytes / sizeof(float);
  if (max_count == 0) max_count = 1;
  if (max_count > (size_t)INT32_MAX) usage_error("--max-bytes is beyond MPI's int count%s%s", "", "");
  float* send = aligned_alloc(64, (max_count * sizeof(float) + 63) / 64 * 64);
  float* recv = aligned_alloc(64, (max_count * sizeof(float) + 63) / 64 * 64);
  if (!send || !recv) {
    fprintf(stderr, "mpi_allreduce_bench: rank %d: cannot allocate 2 x %zu bytes\n", rank_, max_count * 4);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  send_ = send;
  recv_ = recv;

  if (rank_ == 0) {
    if (o.csv) {
      printf("collective,ranks,size_bytes,count,type,op,time_us,algbw_gbps,busbw_gbps,wrong,iters\n");
    } else {
      printf("# mpi_allreduce_bench (MPI_Allreduce): %d ranks, dtype f32, op sum", n);
      if (o.iters > 0) printf(", %lld iters, %lld warm-up", o.iters, o.warmup);
      else printf(", iters adaptive (~%.2f s per size)", o.seconds);
      printf(", check %s\n", o.check ? "on" : "off");
      printf("# size: bytes of the buffer each rank reduces; time: max over ranks of the mean per call\n#\n");
      printf("# %13s %12s %6s %8s %12s %12s %12s %8s %8s\n", "size(B)", "count", "type", "op", "time(us)",
             "algbw(GB/s)", "busbw(GB/s)", "#wrong", "iters");
    }
    fflush(stdout);
  }

  long long total_wrong = 0;
  size_t previous = (size_t)-1;
  for (size_t bytes = o.min_bytes;;) {
    size_t count = bytes / sizeof(float);
    if (bytes > 0 && count == 0) count = 1;
    if (count * sizeof(float) != previous) {
      previous = count * sizeof(float);
      count_ = (int)count;
      for (size_t i = 0; i < count; ++i) send[i] = pattern(rank_, i);
      memset(recv, 0xa5, count * sizeof(float));

      long long wrong = 0;
      if (o.check) {
        call();
        for (size_t i = 0; i < count; ++i) {
          double expected = 0;
          for (int q = 0; q < n; ++q) expected += pattern(q, i);
          wrong += (double)recv[i] != expected;
        }
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
      }
      total_wrong += wrong;

      for (long long i = 0; i < o.warmup; ++i) call();
      long long iters = o.iters;
      if (iters == 0) {
        long long batch = 1;
        double elapsed = time_calls(batch);
        while (elapsed < kCalibrationSeconds && batch < kMaxAdaptiveIters) {
          double grow = elapsed > 0 ? 1.5 * kCalibrationSeconds / elapsed : 100.0;
          if (grow > 100.0) grow = 100.0;
          long long next = (long long)((double)batch * grow);
          if (next < 2 * batch) next = 2 * batch;
          batch = next < kMaxAdaptiveIters ? next : kMaxAdaptiveIters;
          elapsed = time_calls(batch);
        }
        double per_call = elapsed / (double)batch;
        iters = per_call > 0 ? (long long)(o.seconds / per_call) : kMaxAdaptiveIters;
        if (iters < kMinAdaptiveIters) iters = kMinAdaptiveIters;
        if (iters > kMaxAdaptiveIters) iters = kMaxAdaptiveIters;
        MPI_Bcast(&iters, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
      }
      double seconds = time_calls(iters) / (double)iters;

      if (rank_ == 0) {
        double row_bytes = (double)(count * sizeof(float));
        double algbw = seconds > 0 ? row_bytes / seconds / 1e9 : 0;
        double busbw = algbw * 2.0 * (n - 1) / n;
        /* Unchecked rows say so: "n/a", or empty in CSV, as cohort-bench. */
        char wrong_text[32];
        if (o.check) snprintf(wrong_text, sizeof wrong_text, "%lld", wrong);
        else snprintf(wrong_text, sizeof wrong_text, "%s", o.csv ? "" : "n/a");
        if (o.csv)
          printf("allreduce,%d,%zu,%zu,f32,sum,%.4f,%.6f,%.6f,%s,%lld\n", n, count * sizeof(float), count,
                 seconds * 1e6, algbw, busbw, wrong_text, iters);
        else
          printf("  %13zu %12zu %6s %8s %12.2f %12.3f %12.3f %8s %8lld\n", count * sizeof(float), count, "f32",
                 "sum", seconds * 1e6, algbw, busbw, wrong_text, iters);
        fflush(stdout);
      }
    }
    if (bytes == 0) {
      bytes = sizeof(float);
    } else {
      if (bytes > o.max_bytes / o.step_factor) break;
      bytes *= o.step_factor;
    }
    if (bytes > o.max_bytes) break;
  }

  free(send);
  free(recv);
  if (total_wrong > 0 && rank_ == 0) fprintf(stderr, "mpi_allreduce_bench: %lld wrong elements\n", total_wrong);
  MPI_Finalize();
  return total_wrong > 0 ? 1 : 0;
}
