// Progress of a long job (quantizing a model, collecting an importance matrix, writing the
// interleaved copy of a model's weights): the job reports units done out of a total known up
// front; a front end renders it (cli/progress_bar.h draws a bar on a terminal and plain
// lines otherwise; tests record the calls). A null Progress* means nobody is watching.
//
// Called from the thread that drives the job, never concurrently; `done` never decreases.
#pragma once

#include <cstdint>
#include <string_view>

namespace lumen {

class Progress {
 public:
  virtual ~Progress() = default;
  // A job of `total` units starts (`what`: "quantize", "imatrix", a file being written;
  // `unit`: "weights", "chunks", "bytes").
  virtual void start(std::string_view what, uint64_t total, std::string_view unit) = 0;
  // `done` of `total` units are finished; `item` is what is being worked on now (a tensor name).
  virtual void update(uint64_t done, std::string_view item) = 0;
  // The job ended (successfully or not).
  virtual void finish() = 0;
};

}  // namespace lumen
