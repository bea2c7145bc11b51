// The launch thread: a replay's driver calls (kernel launches, graph-segment updates and
// launches) and the stream work queued right after it (the read-back of the arrays asked
// for, the completion event) are issued by one worker thread, in the order posted, while
// the caller's thread goes on (docs/architecture.md, "The launch thread").
//
// Why: in a decode loop the host thread alternates between building step n+1's graph
// (the model's Python) and queueing it (our replay). Per launch the driver costs 2-5 us of
// host time (more on ROCm, whose graphs may stay off); on the replay's thread that time is
// added to every step. On the worker it overlaps the next build.
//
// Ordering contract: everything on the evaluator's stream goes through the worker or
// after it is drained. The posting thread only posts; the Python driver drains before
// any other call that touches the GPU (table.py's @_drained), the evaluator at each of its
// entry points, the replay before a library call or a node that runs in Python, a
// program before its graphs are destroyed. A failure is kept (the first one) and raised
// by the evaluator at its next drain, as an asynchronous evaluation's error.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "graphexec.h"

namespace mlx_amd {

struct LaunchJob {
  enum Kind { Eager, Segment, CopyDtoH, Record } kind = Eager;
  std::vector<LaunchRec> recs;            // Eager, Segment
  std::shared_ptr<GraphState> state;      // Segment: the program's graphs (kept alive)
  size_t segment = 0;
  uintptr_t dst = 0, src = 0, event = 0;  // CopyDtoH (host dst, device src), Record
  size_t nbytes = 0;
  uintptr_t stream = 0;
};

class LaunchThread {
 public:
  // The driver entry points the worker calls (addresses from the Python driver table) and
  // how it binds itself to the device: bind(arg) once, arg a pointer (CUDA's context) or
  // an int (HIP's device ordinal).
  struct Entries {
    uintptr_t launch = 0, copy_dtoh_async = 0, event_record = 0, bind = 0, bind_arg = 0;
    intptr_t param_end = 0;
    bool bind_takes_int = false;
  };

  static LaunchThread* get();               // the process's one worker; null until configured
  static void configure(const Entries& e);  // (re)starts the worker with these entries
  static void shutdown();                   // drains and stops it (interpreter exit)

  uint64_t post(LaunchJob&& job);           // returns the job's sequence number
  // wait until every job up to `seq` (all: UINT64_MAX) was issued; the GIL is released
  // while waiting when the caller holds it
  void wait(uint64_t seq = UINT64_MAX);
  bool idle();                              // nothing posted is left to issue
  uint64_t issued();                        // sequence number of the last job issued
  bool on_worker() const { return std::this_thread::get_id() == worker_.get_id(); }
  const Entries& entries() const { return e_; }

  struct Failure {
    int status = 0;
    std::string what;   // "kernel launch", "graph launch", "copy", "event record"
    LaunchRec rec;
  };
  bool take_failure(Failure* out);          // the first failure since the last take

  std::atomic<int64_t> jobs{0}, launches{0}, waits{0};   // counters (stats)

 private:
  explicit LaunchThread(const Entries& e);
  ~LaunchThread();
  void run();
  void issue(LaunchJob& job);

  Entries e_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<LaunchJob> queue_;
  uint64_t posted_ = 0, done_ = 0;
  bool stop_ = false;
  Failure failure_;
  std::thread worker_;
};

// Drain the worker if there is one and this is not it (cheap when it is idle).
void launcher_quiesce();

void register_launcher(nb::module_& m);

}  // namespace mlx_amd
