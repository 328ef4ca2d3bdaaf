// cnn_peak: the FP32 FMA peak of the cores this process may use, with the vector width the build
// uses (src/ops/simd.hpp: AVX-512 where the build machine has it, else AVX2), measured and beside the
// theoretical one. The CPU benchmark (tools/bench-cpu.sh) divides each row's GFLOP/s by the measured
// peak, so that a figure says how far it is from what these cores can do.
//
//   measured     one thread per core, each running independent FMA chains (enough of them to cover
//                the FMA latency on every pipe) on registers only: the best of several trials.
//   theoretical  cores x clock x FMA pipes x lanes x 2. The clock is measured too (a chain of dependent
//                integer adds, one cycle each, on every core at once), since a VM shows no cpufreq;
//                the FMA pipes per core come from the CPU family (table below), which says where its
//                figure comes from.
// A measured peak under 80% of the theoretical one is flagged: a figure built on it needs a reason
// first (a shared host, a clock that drops under vector load, or a table entry that is wrong).
// Usage: cnn_peak [--threads N] [--seconds S]     (N: default, the cores this process may use)
#include <cpuid.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/simd.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using cnn::simd::Vec;

// Independent accumulators per thread: FMA latency (4-5 cycles) x 2 pipes needs at least 10 in
// flight; 12 keep every pipe busy on the CPUs below while staying in registers (16 or 32 of them).
constexpr int kChains = 12;

struct Cpu {
  std::string vendor, model;
  unsigned family = 0, model_number = 0;
};

Cpu identify() {
  Cpu cpu;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    cpu.vendor = vendor;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const unsigned base_family = (a >> 8) & 0xf, ext_family = (a >> 20) & 0xff;
    const unsigned base_model = (a >> 4) & 0xf, ext_model = (a >> 16) & 0xf;
    cpu.family = base_family == 0xf ? base_family + ext_family : base_family;
    cpu.model_number = base_family == 0xf || base_family == 0x6 ? (ext_model << 4) | base_model : base_model;
  }
  char brand[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf)
    if (__get_cpuid(0x80000002 + leaf, &a, &b, &c, &d)) {
      std::memcpy(brand + 16 * leaf, &a, 4);
      std::memcpy(brand + 16 * leaf + 4, &b, 4);
      std::memcpy(brand + 16 * leaf + 8, &c, 4);
      std::memcpy(brand + 16 * leaf + 12, &d, 4);
    }
  cpu.model = brand;
  while (!cpu.model.empty() && cpu.model.back() == ' ') cpu.model.pop_back();
  return cpu;
}

// FP32 flops per cycle per core at this build's vector width, and where the figure comes from.
// Vendors' optimisation manuals: Zen 5 (family 0x1a) has four 512-bit FP pipes, two of them FMA; Zen
// 2-4 have two 256-bit FMA pipes, and Zen 4 runs a 512-bit FMA on both halves (one per cycle); Intel
// server cores since Skylake-SP have two 512-bit FMA ports on most parts (one on some Silver and
// Bronze), and two 256-bit ones before.
struct PipeRate {
  double flops_per_cycle;
  std::string source;
};

PipeRate fma_rate(const Cpu& cpu) {
  const int lanes = cnn::simd::kLanes;
  const auto rate = [&](int pipes, int pipe_lanes, const std::string& source) {
    // A vector wider than the pipe takes several pipe slots: the rate is the pipes' width.
    return PipeRate{2.0 * pipes * std::min(lanes, pipe_lanes), source};
  };
  if (cpu.vendor == "AuthenticAMD") {
    if (cpu.family >= 0x1a) return rate(2, 16, "AMD Zen 5: 2 FMA pipes of 512 bits");
    if (cpu.family >= 0x17) return rate(2, 8, "AMD Zen 2-4: 2 FMA pipes of 256 bits");
  }
  if (cpu.vendor == "GenuineIntel") {
    if (lanes == 16) return rate(2, 16, "Intel with AVX-512: assumed 2 FMA ports of 512 bits (1 on some Silver/Bronze parts)");
    return rate(2, 8, "Intel: 2 FMA ports of 256 bits");
  }
  return rate(2, 8, "unknown CPU: assumed 2 FMA pipes of 256 bits");
}

// The clock of each core under load: a chain of dependent integer adds retires one per cycle.
double measure_clock_hz(int threads, double seconds) {
  std::vector<double> hz(static_cast<std::size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    const std::uint64_t rounds = 1 << 20;
    std::uint64_t x = 0;
    double best = 0.0;
    const Clock::time_point stop =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < stop) {
      const Clock::time_point t0 = Clock::now();
      for (std::uint64_t r = 0; r < rounds; ++r)
        asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                     : "+r"(x));
      const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      best = std::max(best, 8.0 * static_cast<double>(rounds) / elapsed);
    }
    hz[static_cast<std::size_t>(omp_get_thread_num())] = best;
  }
  return *std::min_element(hz.begin(), hz.end());  // the slowest core bounds a balanced job
}

// kChains independent FMA chains for `iterations` rounds, in registers (named locals: an array would
// live on the stack, and a load and a store per FMA would be what this measures). Returns their sum.
static_assert(kChains == 12, "fma_chains runs 12 named chains: change both together");
__attribute__((noinline)) float fma_chains(std::int64_t iterations) {
  // x <- x * (1 - 2^-23) + 2^-24 stays near 1: no overflow, no denormals.
  const Vec scale = cnn::simd::splat(1.0f - 1.0f / 8388608.0f), shift = cnn::simd::splat(1.0f / 16777216.0f);
  Vec a0 = cnn::simd::splat(1.00f), a1 = cnn::simd::splat(1.01f), a2 = cnn::simd::splat(1.02f),
      a3 = cnn::simd::splat(1.03f), a4 = cnn::simd::splat(1.04f), a5 = cnn::simd::splat(1.05f),
      a6 = cnn::simd::splat(1.06f), a7 = cnn::simd::splat(1.07f), a8 = cnn::simd::splat(1.08f),
      a9 = cnn::simd::splat(1.09f), a10 = cnn::simd::splat(1.10f), a11 = cnn::simd::splat(1.11f);
  for (std::int64_t i = 0; i < iterations; ++i) {
    a0 = a0 * scale + shift;
    a1 = a1 * scale + shift;
    a2 = a2 * scale + shift;
    a3 = a3 * scale + shift;
    a4 = a4 * scale + shift;
    a5 = a5 * scale + shift;
    a6 = a6 * scale + shift;
    a7 = a7 * scale + shift;
    a8 = a8 * scale + shift;
    a9 = a9 * scale + shift;
    a10 = a10 * scale + shift;
    a11 = a11 * scale + shift;
    // Opaque to the compiler, so that it keeps every chain and every FMA (it merges affine chains).
    asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                 "+v"(a9), "+v"(a10), "+v"(a11));
  }
  return cnn::simd::sum(((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11)));
}

// FP32 FMA flops per second on `threads` cores at once: the best of `trials` trials.
double measure_fma_flops(int threads, double seconds, int trials) {
  // Rounds per trial: about seconds / trials at the Zen 5 rate, shorter elsewhere is fine.
  const std::int64_t iterations = static_cast<std::int64_t>(seconds / trials * 4e8 / kChains * 2);
  double best = 0.0;
  for (int trial = 0; trial < trials; ++trial) {
    double elapsed = 0.0;
    float sink = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
#pragma omp barrier
      const Clock::time_point t0 = Clock::now();
      sink += fma_chains(iterations);
#pragma omp barrier
      const Clock::time_point t1 = Clock::now();
#pragma omp master
      elapsed = std::chrono::duration<double>(t1 - t0).count();
    }
    if (sink == 0.123f) std::puts("");  // the result is used
    const double flops = 2.0 * kChains * cnn::simd::kLanes * static_cast<double>(iterations) * threads;
    best = std::max(best, flops / elapsed);
  }
  return best;
}

int allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace

int main(int argc, char** argv) {
  int threads = allowed_cores();
  double seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: cnn_peak [--threads N] [--seconds S]\n");
      return 2;
    }
  }
  if (threads < 1 || !(seconds > 0.0)) {
    std::fprintf(stderr, "cnn_peak: --threads must be at least 1 and --seconds positive\n");
    return 2;
  }
  const Cpu cpu = identify();
  const PipeRate pipes = fma_rate(cpu);
  const double clock_hz = measure_clock_hz(threads, 0.25 * seconds);
  const double measured = measure_fma_flops(threads, seconds, 5);
  const double theoretical = threads * clock_hz * pipes.flops_per_cycle;
  std::printf("cnn_peak: %s (%s, family 0x%x, model 0x%x), %d core(s), %s (%d FP32 lanes)\n", cpu.model.c_str(),
              cpu.vendor.c_str(), cpu.family, cpu.model_number, threads,
              cnn::simd::kLanes == 16 ? "AVX-512" : "AVX2", cnn::simd::kLanes);
  std::printf("clock: %.2f GHz per core under load (dependent integer adds on every core at once)\n", clock_hz / 1e9);
  std::printf("theoretical: %d x %.2f GHz x %.0f flops/cycle (%s) = %.1f GFLOP/s\n", threads, clock_hz / 1e9,
              pipes.flops_per_cycle, pipes.source.c_str(), theoretical / 1e9);
  std::printf("measured: %.1f GFLOP/s = %.1f%% of theoretical (%d independent FMA chains per core)\n",
              measured / 1e9, 100.0 * measured / theoretical, kChains);
  if (measured < 0.8 * theoretical)
    std::printf("note: the measured peak is under 80%% of the theoretical one: explain it (a shared host, a "
                "clock that drops under vector load, or fewer FMA pipes than assumed) before using it\n");
  std::printf("peak_gflops %.1f\n", measured / 1e9);
  return 0;
}
