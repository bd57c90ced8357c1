// The collectives a tensor-parallel group needs (model/tensor_parallel.h): rank 0 sends
// each step to the others, and every rank sums its partial layer outputs with the rest.
// The MPI implementation lives in dist/ (an optional build feature); the model sees only
// this interface.
//
//   Communicator& comm = ...;              // dist::start_mpi(tp)
//   comm.broadcast(header, sizeof header); // rank 0's bytes land on every rank
//   comm.all_reduce_sum(h, n_tokens * n_embd);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ridge {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Rank 0's `bytes` bytes at data are copied to data on every other rank. On ranks other
  // than 0 this waits as long as it takes (a server's workers idle between requests).
  virtual void broadcast(void* data, size_t bytes) = 0;
  // data[i] = the sum over ranks of data[i], on every rank. Throws ridge::Error (or ends
  // the job) when a rank does not take part in time: a dead peer must not hang the others.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;

  // Rank r holds columns col_first[r] .. col_first[r + 1] - 1 of a [rows][whole_cols]
  // matrix, as [rows][its width] at part; rank 0 receives every other rank's columns into
  // whole (its own columns it places itself; part is unused there, whole elsewhere).
  // Deadlines as all_reduce_sum.
  virtual void gather_columns(float* whole, int64_t rows, int64_t whole_cols, const float* part,
                              const int64_t* col_first) = 0;

  // Prints message as this rank's error and ends every rank of the job (a rank that
  // cannot go on must not leave the others waiting in a collective).
  [[noreturn]] virtual void abort(const std::string& message) = 0;

  // Bytes this rank has handed to all_reduce_sum so far (its payload, not the wire
  // traffic of the algorithm), for benchmarks against the formula.
  uint64_t all_reduce_bytes() const { return all_reduce_bytes_; }

 protected:
  uint64_t all_reduce_bytes_ = 0;
};

}  // namespace ridge
