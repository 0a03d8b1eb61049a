// matmul_jobs: many matmuls in one parallel job give, row for row, the bits matmul() gives
// each of them alone, on every kernel table of this host and any thread count: weights of
// several dtypes in one call, with and without an interleaved copy, jobs of 1 to 30 rows,
// jobs sharing their input (converted once), row counts that are not a multiple of a group.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_test_util.h"
#include "kernels/matmul_jobs.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

struct Weight {
  std::vector<std::byte> data, copy;
  TensorView w;
};

// A random [n_out][n_in] weight of dtype dt, with an interleaved copy in the table's layout
// when `interleave` and the table has one.
Weight make_weight(std::mt19937& rng, const KernelTable& table, DType dt, int64_t n_in, int64_t n_out,
                   bool interleave) {
  Weight m;
  m.data = testing::random_weights(rng, dt, n_out, n_in);
  m.w.dtype = dt;
  m.w.n_dims = 2;
  m.w.ne[0] = n_in;
  m.w.ne[1] = n_out;
  m.w.data = m.data.data();
  m.w.n_bytes = m.data.size();
  const InterleavedKernels& ik = find_matmul_kernels(table, dt)->interleaved;
  if (interleave && ik.layout != nullptr) {
    m.copy.resize(((n_out + ik.rows - 1) / ik.rows) * ik.group_bytes(n_in));
    ik.pack(n_in, m.data.data(), row_bytes(dt, n_in), n_out, m.copy.data());
    m.w.interleaved = m.copy.data();
    m.w.interleaved_layout = ik.layout;
    m.w.interleaved_n_bytes = m.copy.size();
  }
  return m;
}

TEST(KernelsMatmulJobs, EqualMatmulOfEachJobBitForBit) {
  std::mt19937 rng(7);
  ThreadPool pool1(1), pool2(2), pool3(3);
  int n_interleaved = 0;
  for (const KernelTable* table : available_kernel_tables()) {
    for (DType dt : testing::matmul_types()) {
      SCOPED_TRACE(std::string(table->name) + " " + std::string(dtype_name(dt)));
      const int64_t block = dtype_info(dt).block_size;
      const int64_t n_in = block == 256 ? 512 : 256, n_in2 = block == 256 ? 256 : 96;
      // Expert-like: gate and up of one input, then an expert of another width and dtype
      // (q8_0 beside it: a file mixing types), with row counts off the group size.
      // Job 2 has as many rows as job 1 but an input of its own (not to be shared).
      std::vector<Weight> ws;
      ws.push_back(make_weight(rng, *table, dt, n_in, 45, true));
      ws.push_back(make_weight(rng, *table, dt, n_in, 45, true));
      ws.push_back(make_weight(rng, *table, dt, n_in, 24, true));
      ws.push_back(make_weight(rng, *table, dt, n_in, 133, false));
      ws.push_back(make_weight(rng, *table, DType::kQ8_0, n_in, 19, true));
      ws.push_back(make_weight(rng, *table, dt, n_in2, 64, true));
      n_interleaved += ws[0].w.interleaved != nullptr;
      constexpr int kJobs = 6;
      const int64_t n_tok[kJobs] = {3, 3, 3, 30, 1, 9};
      std::vector<std::vector<float>> x(kJobs), want(kJobs), got(kJobs);
      for (int j = 0; j < kJobs; ++j) {
        const int64_t n = ws[j].w.ne[0];
        x[j] = j == 1 ? x[0] : testing::random_floats(rng, n * n_tok[j]);
        want[j].resize(ws[j].w.n_rows() * n_tok[j]);
        std::vector<std::byte> scratch(matmul_scratch_bytes(ws[j].w.dtype, n, n_tok[j], 1));
        matmul(*table, pool1, ws[j].w, x[j].data(), n_tok[j], want[j].data(), scratch.data());
      }
      for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
        SCOPED_TRACE("threads=" + std::to_string(pool->n_threads()));
        std::vector<MatmulJob> jobs;
        for (int j = 0; j < kJobs; ++j) {
          got[j].assign(want[j].size(), -1.0f);
          // Job 1 shares job 0's input (the same pointer): converted once.
          jobs.push_back({&ws[j].w, j == 1 ? x[0].data() : x[j].data(), n_tok[j], got[j].data()});
        }
        const MatmulJobRows rows[] = {{dt, n_in, 3 + 3 + 3 + 30}, {DType::kQ8_0, n_in, 1}, {dt, n_in2, 9}};
        std::vector<std::byte> scratch(matmul_jobs_scratch_bytes(kJobs, rows));
        matmul_jobs(*table, *pool, jobs, scratch.data(), scratch.size());
        for (int j = 0; j < kJobs; ++j) EXPECT_EQ(got[j], want[j]) << "job " << j;
      }
    }
  }
  if (best_kernel_table().name != std::string("scalar")) {
    EXPECT_GT(n_interleaved, 0) << "no interleaved kernels";
  }
}

}  // namespace
}  // namespace lumen::kernels
