// Where PowerSGD's matrices lie for its CUDA kernels (powersgd.cuh): plain C++, so that
// the exchange and the tests can build the table without CUDA's headers.
#pragma once

#include <cstdint>
#include <vector>

namespace acc::compress::cuda::powersgd {

constexpr int kMaxRank = 4;  // the kernels' register arrays; higher ranks take the ATen path

/// One matrix of the step: where it lies in each buffer (in floats from the buffer's
/// start: M the memories, [rows, cols]; P [rows, rank]; Q [cols, rank]) and its place
/// among all matrices' rows and columns. M holds the matrices back to back in the
/// table's order, so `m` is also the matrix's place among all values.
struct Matrix {
    std::int64_t m;
    std::int64_t p, q;
    std::int64_t first_row, first_column;
    std::int64_t rows, cols, rank;
};

/// The table, in the order of M, and the totals the launches need.
struct Layout {
    std::vector<Matrix> matrices;
    std::int64_t rows = 0, columns = 0, values = 0;

    /// The next matrix: after the others in M, its P and Q where given.
    void append(std::int64_t p, std::int64_t q, std::int64_t rows_, std::int64_t cols, std::int64_t rank) {
        matrices.push_back({values, p, q, rows, columns, rows_, cols, rank});
        values += rows_ * cols;
        rows += rows_;
        columns += cols;
    }
};

}  // namespace acc::compress::cuda::powersgd
