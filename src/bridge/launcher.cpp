// The launch thread (launcher.h).
#include "launcher.h"

#include <Python.h>
#include <pthread.h>
#include <nanobind/stl/string.h>

namespace mlx_amd {

namespace {
LaunchThread* g_thread = nullptr;   // leaked at exit (shutdown() stops it first)
std::mutex g_config_mu;
}  // namespace

LaunchThread* LaunchThread::get() { return g_thread; }

LaunchThread::LaunchThread(const Entries& e) : e_(e) {
  worker_ = std::thread([this] { run(); });
}

LaunchThread::~LaunchThread() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void LaunchThread::configure(const Entries& e) {
  // a forked child has no worker (only the forking thread survives fork): it forgets the
  // parent's, whose queue nobody would serve, and launches itself
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, [] { g_thread = nullptr; }); });
  std::lock_guard<std::mutex> g(g_config_mu);
  if (g_thread != nullptr) {
    g_thread->wait();
    delete g_thread;
    g_thread = nullptr;
  }
  g_thread = new LaunchThread(e);
}

void LaunchThread::shutdown() {
  std::lock_guard<std::mutex> g(g_config_mu);
  if (g_thread != nullptr) {
    g_thread->wait();
    delete g_thread;
    g_thread = nullptr;
  }
}

uint64_t LaunchThread::post(LaunchJob&& job) {
  uint64_t seq;
  bool was_idle;
  {
    std::lock_guard<std::mutex> g(mu_);
    was_idle = queue_.empty();
    queue_.push_back(std::move(job));
    seq = ++posted_;
    ++jobs;
  }
  if (was_idle) work_cv_.notify_one();   // (a busy worker takes the next job without a wake-up)
  return seq;
}

bool LaunchThread::idle() {
  std::lock_guard<std::mutex> g(mu_);
  return done_ == posted_;
}

uint64_t LaunchThread::issued() {
  std::lock_guard<std::mutex> g(mu_);
  return done_;
}

void LaunchThread::wait(uint64_t seq) {
  std::unique_lock<std::mutex> lk(mu_);
  if (seq > posted_) seq = posted_;
  if (done_ >= seq) return;
  ++waits;
  // never wait holding the GIL: the worker does not need it, but other Python threads do
  PyThreadState* ts = (Py_IsInitialized() && PyGILState_Check()) ? PyEval_SaveThread() : nullptr;
  done_cv_.wait(lk, [&] { return done_ >= seq; });
  lk.unlock();
  if (ts != nullptr) PyEval_RestoreThread(ts);
}

bool LaunchThread::take_failure(Failure* out) {
  std::lock_guard<std::mutex> g(mu_);
  if (failure_.status == 0) return false;
  *out = std::move(failure_);
  failure_ = Failure{};
  return true;
}

void LaunchThread::run() {
  if (e_.bind != 0) {
    // the device (CUDA: the primary context) is per thread: bind once, as Python's _bind does
    int st = e_.bind_takes_int
                 ? reinterpret_cast<int (*)(int)>(e_.bind)(static_cast<int>(e_.bind_arg))
                 : reinterpret_cast<int (*)(void*)>(e_.bind)(reinterpret_cast<void*>(e_.bind_arg));
    if (st) {
      std::lock_guard<std::mutex> g(mu_);
      failure_.status = st;
      failure_.what = "binding the launch thread to the device";
    }
  }
  for (;;) {
    LaunchJob job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;   // stop_, everything issued
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    issue(job);
    {
      std::lock_guard<std::mutex> g(mu_);
      ++done_;
    }
    done_cv_.notify_all();
  }
}

void LaunchThread::issue(LaunchJob& job) {
  int st = 0;
  const char* what = "kernel launch";
  LaunchRec failed;
  switch (job.kind) {
    case LaunchJob::Eager: {
      // every record is issued even after a failure (the arrays of the others are finished
      // already and must get their kernels); the first failure is reported
      for (size_t from = 0; from < job.recs.size();) {
        size_t at = 0;
        int s = launch_eager(job.recs, from, e_.launch, e_.param_end, job.stream, &at);
        if (s == 0) break;
        if (st == 0) {
          st = s;
          failed = job.recs[at];
        }
        from = at + 1;
      }
      launches += static_cast<int64_t>(job.recs.size());
      break;
    }
    case LaunchJob::Segment:
      st = graph_run(*job.state, job.segment, job.recs, e_.launch, e_.param_end, job.stream, &what);
      if (st && std::string(what) == "kernel launch" && !job.recs.empty()) failed = job.recs[0];
      launches += static_cast<int64_t>(job.recs.size());
      break;
    case LaunchJob::CopyDtoH:
      what = "copy";
      st = reinterpret_cast<int (*)(void*, uintptr_t, size_t, void*)>(e_.copy_dtoh_async)(
          reinterpret_cast<void*>(job.dst), job.src, job.nbytes, reinterpret_cast<void*>(job.stream));
      break;
    case LaunchJob::Record:
      what = "event record";
      st = reinterpret_cast<int (*)(void*, void*)>(e_.event_record)(
          reinterpret_cast<void*>(job.event), reinterpret_cast<void*>(job.stream));
      break;
  }
  if (st) {
    std::lock_guard<std::mutex> g(mu_);
    if (failure_.status == 0) {
      failure_.status = st;
      failure_.what = what;
      failure_.rec = std::move(failed);
    }
  }
}

void launcher_quiesce() {
  LaunchThread* t = LaunchThread::get();
  if (t != nullptr && !t->on_worker()) t->wait();
}

void register_launcher(nb::module_& m) {
  using namespace nb::literals;
  m.def("launcher_start", [](uintptr_t launch, intptr_t param_end, uintptr_t copy_dtoh_async,
                             uintptr_t event_record, uintptr_t bind, uintptr_t bind_arg,
                             bool bind_takes_int) {
    if (!launch || !copy_dtoh_async || !event_record) {
      throw nb::value_error("launcher_start: an entry point address is 0");
    }
    LaunchThread::configure({launch, copy_dtoh_async, event_record, bind, bind_arg, param_end,
                             bind_takes_int});
  }, "launch"_a, "param_end"_a, "copy_dtoh_async"_a, "event_record"_a, "bind"_a, "bind_arg"_a,
     "bind_takes_int"_a,
     "start (or restart) the launch thread with the driver's entry points (launcher.h)");
  m.def("launcher_stop", &LaunchThread::shutdown, "drain the launch thread and stop it");
  m.def("launcher_running", []() { return LaunchThread::get() != nullptr; });
  m.def("launcher_busy", []() {
    LaunchThread* t = LaunchThread::get();
    return t != nullptr && !t->idle();
  }, "whether posted work is still to be issued");
  m.def("launcher_wait", [](uint64_t seq) {
    if (LaunchThread* t = LaunchThread::get()) t->wait(seq);
  }, "seq"_a = UINT64_MAX, "wait until the jobs up to `seq` (default: all) were issued");
  // a copy or an event record from Python, behind what the replays posted
  static auto post = [](const char* who, LaunchJob::Kind kind, uintptr_t stream, uintptr_t dst,
                        uintptr_t src, size_t nbytes, uintptr_t event) -> uint64_t {
    LaunchThread* t = LaunchThread::get();
    if (t == nullptr) throw nb::value_error((std::string(who) + ": no launch thread").c_str());
    LaunchJob j;
    j.kind = kind;
    j.stream = stream;
    j.dst = dst;
    j.src = src;
    j.nbytes = nbytes;
    j.event = event;
    return t->post(std::move(j));
  };
  m.def("launcher_post_copy_dtoh", [](uintptr_t dst, uintptr_t src, size_t nbytes, uintptr_t stream) {
    return post("launcher_post_copy_dtoh", LaunchJob::CopyDtoH, stream, dst, src, nbytes, 0);
  }, "dst"_a, "src"_a, "nbytes"_a, "stream"_a,
     "queue a device-to-host copy on `stream` behind the posted launches; its sequence number");
  m.def("launcher_post_record", [](uintptr_t event, uintptr_t stream) {
    return post("launcher_post_record", LaunchJob::Record, stream, 0, 0, 0, event);
  }, "event"_a, "stream"_a,
     "queue an event record on `stream` behind the posted launches; its sequence number");
  m.def("launcher_failure", []() -> nb::object {
    LaunchThread* t = LaunchThread::get();
    LaunchThread::Failure f;
    if (t == nullptr || !t->take_failure(&f)) return nb::none();
    return nb::make_tuple(f.status, f.what, f.rec.function,
                          nb::make_tuple(f.rec.grid[0], f.rec.grid[1], f.rec.grid[2]),
                          nb::make_tuple(f.rec.block[0], f.rec.block[1], f.rec.block[2]),
                          nb::bytes(f.rec.args.data(), f.rec.args.size()), f.rec.shared_mem);
  }, "the first failure since the last call: (status, what, function, grid, block, args, "
     "shared_mem), or None");
  m.def("launcher_stats", []() {
    nb::dict d;
    LaunchThread* t = LaunchThread::get();
    d["running"] = t != nullptr;
    d["jobs"] = t ? t->jobs.load() : int64_t(0);
    d["launches"] = t ? t->launches.load() : int64_t(0);
    d["waits"] = t ? t->waits.load() : int64_t(0);
    return d;
  }, "the launch thread's counts: jobs posted, launches issued, waits that blocked");
}

}  // namespace mlx_amd
