// The reference side of bench/allreduce_vs_mpi: MPI_Allreduce (float, sum) over sizes
// stepping x2, timed like weft comm-bench (barrier, one operation, median over the
// repeats of the slowest rank; the input filled once per size). Prints one JSON object per
// size on rank 0.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  long long min_bytes = argc > 1 ? std::atoll(argv[1]) : 8;
  long long max_bytes = argc > 2 ? std::atoll(argv[2]) : (64LL << 20);
  int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  int warmup = 3;
  for (long long bytes = std::max(min_bytes, 4LL); bytes <= max_bytes; bytes *= 2) {
    long long count = bytes / 4;
    std::vector<float> in(count), out(count);
    std::vector<double> times;
    for (long long i = 0; i < count; ++i) in[i] = static_cast<float>((rank + 1) * 3 + i % 7);
    for (int it = 0; it < warmup + iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double us = (MPI_Wtime() - t0) * 1e6;
      if (it >= warmup) times.push_back(us);
    }
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2], slowest = 0;
    MPI_Allreduce(&median, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    long long wrong = 0, total_wrong = 0;
    for (long long i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < world; ++r) want += (r + 1) * 3 + i % 7;
      wrong += out[i] != static_cast<float>(want);
    }
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    double algbw = bytes / (slowest * 1e3);
    double busbw = algbw * 2.0 * (world - 1) / world;
    if (rank == 0) {
      std::printf("{\"bytes\":%lld,\"time_us\":%.2f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,\"wrong\":%lld}\n", bytes,
                  slowest, algbw, busbw, total_wrong);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
