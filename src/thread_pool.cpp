// The persistent helper threads of src/thread_pool.h and their Python binding.
//
// One call holds the pool at a time (g_busy); only that call creates, grows or publishes to
// the pool, so no lock guards the pool pointer itself. A call is a Job on the caller's stack:
// the caller publishes it under the pool's mutex (a new generation number), helpers that see
// the new generation join it under the mutex (at most `wanted` of them, numbered 1, 2, ...),
// claim items from the job's atomic counter, and leave by decrementing `active`. When the
// caller has run out of items it unpublishes the job (no helper joins after that) and waits
// for `active` to reach zero: every item was claimed by then, so every item is done, and no
// helper touches the job afterwards.
#include "thread_pool.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define ONNX_LIGHT_PAUSE() _mm_pause()
#else
#define ONNX_LIGHT_PAUSE() std::this_thread::yield()
#endif
#ifndef _WIN32
#include <pthread.h>
#include <time.h>
#endif

namespace nb = nanobind;

namespace onnx_light_pool {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int MAX_HELPERS = 63;  // conv2d takes at most 64 threads

// the statistics of set_stats: item i of the recorded runs took item_ns[i] of thread CPU on
// worker item_worker[i]; worker w spent worker_ns[w] inside runs, from its first claim to
// its last item's end; reset by stats_take()
struct Stats {
    std::atomic<bool> on{false};
    std::mutex mutex;  // guards the vectors against a concurrent stats_take
    std::vector<int64_t> item_ns, worker_ns;
    std::vector<int32_t> item_worker;
    std::vector<int64_t> run_items;  // the items of each recorded run, in order
    int64_t caller_ns = 0;  // the callers' thread CPU time inside run() (items, publishing, waiting)
};
Stats g_stats;

int64_t thread_cpu_ns() {
#if defined(CLOCK_THREAD_CPUTIME_ID)
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
#else
    return 0;
#endif
}

struct Job {
    ItemFn fn;
    const void *ctx;
    int64_t items;
    int wanted;  // helpers that may join
    int joined = 0;  // under Pool::mutex
    std::atomic<int64_t> next{0};
    std::atomic<int> active{0};  // helpers inside work()
    std::atomic<bool> failed{false};
    std::exception_ptr error;  // the first exception; written by the one worker that set `failed`

    int64_t *item_ns = nullptr;  // set_stats: this run's slice of Stats::item_ns (and worker ids)
    int32_t *item_worker = nullptr;
    int64_t worker_ns[64] = {};

    Job(ItemFn f, const void *c, int64_t n, int w) : fn(f), ctx(c), items(n), wanted(w) {}
    void work(int worker) {
        try {
            if (item_ns) return timed_work(worker);
            for (int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < items;)
                fn(ctx, worker, i);
        } catch (...) {
            if (!failed.exchange(true)) error = std::current_exception();
        }
    }
    void timed_work(int worker) {
        const int64_t start = thread_cpu_ns();
        for (int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < items;) {
            const int64_t t = thread_cpu_ns();
            fn(ctx, worker, i);
            item_ns[i] = thread_cpu_ns() - t, item_worker[i] = worker;
        }
        worker_ns[worker] = thread_cpu_ns() - start;
    }
};

// the run's Job records its items into g_stats (when on) from construction to destruction
struct Recording {
    Job &job;
    size_t first = 0;
    bool on;
    int64_t start = 0;
    explicit Recording(Job &j) : job(j), on(g_stats.on.load(std::memory_order_relaxed)) {
        if (!on) return;
        start = thread_cpu_ns();
        std::lock_guard<std::mutex> lock(g_stats.mutex);
        first = g_stats.item_ns.size();
        g_stats.item_ns.resize(first + job.items, 0);
        g_stats.item_worker.resize(first + job.items, -1);
        job.item_ns = g_stats.item_ns.data() + first, job.item_worker = g_stats.item_worker.data() + first;
    }
    ~Recording() {
        if (!on) return;
        std::lock_guard<std::mutex> lock(g_stats.mutex);
        if (g_stats.worker_ns.size() < 64) g_stats.worker_ns.resize(64, 0);
        for (int w = 0; w < 64; ++w) g_stats.worker_ns[w] += job.worker_ns[w];
        g_stats.run_items.push_back(job.items);
        g_stats.caller_ns += thread_cpu_ns() - start;
    }
};

struct Pool {
    std::mutex mutex;
    std::condition_variable wake, idle;
    std::vector<std::thread> threads;
    Job *job = nullptr;  // the published call, under mutex
    std::atomic<uint64_t> generation{0};
    std::atomic<bool> stop{false};
    int sleeping = 0;  // helpers waiting on `wake`, under mutex
};

std::atomic<bool> g_busy{false};  // a call holds the pool
Pool *g_pool = nullptr;           // touched only by the holder of g_busy (and fork's child)
std::atomic<int> g_spin_us{-1};   // -1: not read from the environment yet
std::atomic<int> g_helpers{0};

int spin_setting() {
    int us = g_spin_us.load(std::memory_order_relaxed);
    if (us < 0) {
        const char *env = std::getenv("ONNX_LIGHT_POOL_SPIN_US");
        us = env ? std::max(0, std::atoi(env)) : 200;
        g_spin_us.store(us, std::memory_order_relaxed);
    }
    return us;
}

// polls done() for up to `us` microseconds; true when it became true. Every microsecond or
// so it yields, so that on a busy core the thread it waits for (or another job) runs.
template <class Done>
bool spin_until(int us, const Done &done) {
    if (done()) return true;
    const auto end = Clock::now() + std::chrono::microseconds(us);
    for (;;) {
        for (int k = 0; k < 32; ++k) {
            if (done()) return true;
            ONNX_LIGHT_PAUSE();
        }
        if (Clock::now() >= end) return false;
        std::this_thread::yield();
    }
}

void helper_main(Pool *p, uint64_t seen) {
    for (;;) {
        const auto fresh = [&] {
            return p->stop.load(std::memory_order_acquire) || p->generation.load(std::memory_order_acquire) != seen;
        };
        spin_until(spin_setting(), fresh);
        std::unique_lock<std::mutex> lock(p->mutex);
        if (!fresh()) {
            ++p->sleeping;
            p->wake.wait(lock, fresh);
            --p->sleeping;
        }
        if (p->stop.load()) return;
        seen = p->generation.load();
        Job *job = p->job;
        if (!job || job->joined >= job->wanted) continue;
        const int worker = ++job->joined;
        job->active.fetch_add(1);
        lock.unlock();
        job->work(worker);
        if (job->active.fetch_sub(1) == 1) {  // the job may end now: touch only the pool
            std::lock_guard<std::mutex> guard(p->mutex);
            p->idle.notify_all();
        }
    }
}

// the pool with at least `want` helpers (fewer when the system refuses threads); the caller holds g_busy
Pool *pool_with(int want) {
    if (!g_pool) g_pool = new Pool;
    Pool *p = g_pool;
    while (static_cast<int>(p->threads.size()) < want) {
        try {
            p->threads.emplace_back(helper_main, p, p->generation.load());
        } catch (const std::system_error &) {
            break;
        }
        g_helpers.store(static_cast<int>(p->threads.size()));
    }
    return p;
}

void serial(int64_t items, ItemFn fn, const void *ctx) {
    if (g_stats.on.load(std::memory_order_relaxed) && !g_busy.load()) {  // recorded like one worker's run
        Job job(fn, ctx, items, 0);
        const Recording rec(job);
        job.work(0);
        if (job.error) std::rethrow_exception(job.error);
        return;
    }
    for (int64_t i = 0; i < items; ++i) fn(ctx, 0, i);
}

// after fork() only the forking thread exists: the parent's helpers (and whatever call held
// the pool) are gone, so the child forgets that pool (leaked, never touched) and makes its own
void forget_after_fork() {
    g_pool = nullptr;
    g_helpers.store(0);
    g_busy.store(false);
}

struct ForkHook {
    ForkHook() {
#ifndef _WIN32
        pthread_atfork(nullptr, nullptr, forget_after_fork);
#endif
    }
};
const ForkHook fork_hook;

struct Release {
    ~Release() { g_busy.store(false, std::memory_order_release); }
};

}  // namespace

void run(int threads, int64_t items, ItemFn fn, const void *ctx) {
    if (threads <= 1 || items <= 1) return serial(items, fn, ctx);
    bool expected = false;
    if (!g_busy.compare_exchange_strong(expected, true, std::memory_order_acquire))
        return serial(items, fn, ctx);  // another call holds the pool
    const Release release;
    const int want = static_cast<int>(std::min<int64_t>({threads - 1, items - 1, MAX_HELPERS}));
    Pool *p = pool_with(want);
    Job job(fn, ctx, items, std::min(want, static_cast<int>(p->threads.size())));
    if (job.wanted == 0) return serial(items, fn, ctx);
    const Recording rec(job);
    {
        std::lock_guard<std::mutex> lock(p->mutex);
        p->job = &job;
        p->generation.fetch_add(1, std::memory_order_release);
        if (p->sleeping) p->wake.notify_all();
    }
    job.work(0);
    {
        std::lock_guard<std::mutex> lock(p->mutex);
        p->job = nullptr;  // no helper joins from now on
    }
    const auto idle = [&] { return job.active.load(std::memory_order_acquire) == 0; };
    if (!spin_until(spin_setting(), idle)) {
        std::unique_lock<std::mutex> lock(p->mutex);
        p->idle.wait(lock, idle);
    }
    if (job.error) std::rethrow_exception(job.error);
}

int helpers() { return g_helpers.load(); }

void shutdown() {
    for (bool expected = false; !g_busy.compare_exchange_weak(expected, true, std::memory_order_acquire);
         expected = false)
        std::this_thread::yield();  // a running call finishes first
    const Release release;
    Pool *p = g_pool;
    if (!p) return;
    {
        std::lock_guard<std::mutex> lock(p->mutex);
        p->stop.store(true, std::memory_order_release);
    }
    p->wake.notify_all();
    for (std::thread &t : p->threads) t.join();
    g_pool = nullptr;
    g_helpers.store(0);
    delete p;
}

void set_stats(bool on) { g_stats.on.store(on); }

void set_spin_us(int us) { g_spin_us.store(std::max(0, us)); }
int spin_us() { return spin_setting(); }

namespace {

struct SelfTest {
    int32_t *worker;
    int64_t throw_at;
    int64_t work_ns;
};

void selftest_item(const void *ctx, int worker, int64_t i) {
    const SelfTest &t = *static_cast<const SelfTest *>(ctx);
    if (i == t.throw_at) throw std::runtime_error("thread pool self-test: item " + std::to_string(i) + " failed");
    const auto end = Clock::now() + std::chrono::nanoseconds(t.work_ns);
    while (Clock::now() < end) ONNX_LIGHT_PAUSE();
    t.worker[i] = worker;
}

using WorkerIds = nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>;

// which worker ran each of `items` items (each busy for work_ns; item throw_at throws): the
// tests' handle on run()
WorkerIds selftest(int threads, int64_t items, int64_t throw_at, int64_t work_ns) {
    if (threads < 1 || threads > 64) throw std::invalid_argument("thread_pool_selftest: threads must be in [1, 64]");
    if (items < 0) throw std::invalid_argument("thread_pool_selftest: items must be >= 0");
    std::unique_ptr<int32_t[]> ids(new int32_t[items ? items : 1]);
    std::fill(ids.get(), ids.get() + items, -1);
    const SelfTest t{ids.get(), throw_at, work_ns};
    {
        nb::gil_scoped_release release;
        run(threads, items, selftest_item, &t);
    }
    nb::capsule owner(ids.get(), [](void *ptr) noexcept { delete[] static_cast<int32_t *>(ptr); });
    int32_t *data = ids.release();
    return WorkerIds(data, {static_cast<size_t>(items)}, owner);
}

// the statistics recorded since the last call (and forgets them): item CPU times and workers,
// the workers' CPU time inside runs, the items of each run, the callers' CPU time inside runs
nb::tuple stats_take() {
    std::vector<int64_t> ns, wns, runs;
    std::vector<int32_t> wk;
    int64_t caller;
    {
        std::lock_guard<std::mutex> lock(g_stats.mutex);
        ns.swap(g_stats.item_ns), wk.swap(g_stats.item_worker), wns.swap(g_stats.worker_ns);
        runs.swap(g_stats.run_items);
        caller = g_stats.caller_ns, g_stats.caller_ns = 0;
    }
    nb::list items, workers, inside, sizes;
    for (int64_t v : runs) sizes.append(v);
    for (int64_t v : ns) items.append(v);
    for (int32_t v : wk) workers.append(v);
    for (int64_t v : wns) inside.append(v);
    return nb::make_tuple(items, workers, inside, sizes, caller);
}

void shutdown_released() {
    nb::gil_scoped_release release;
    shutdown();
}

}  // namespace
}  // namespace onnx_light_pool

void bind_thread_pool(nb::module_ &m) {
    using namespace onnx_light_pool;
    m.def("thread_pool_helpers", &helpers, "The native thread pool's helper threads alive now");
    m.def("thread_pool_shutdown", &shutdown_released,
          "Stops and joins the native thread pool's helpers (a later threaded call starts them again)");
    m.def("thread_pool_spin_us", &spin_us, "How long (us) an idle helper polls for work before it sleeps");
    m.def("thread_pool_set_spin_us", &set_spin_us, nb::arg("us"), "Sets thread_pool_spin_us");
    m.def("thread_pool_set_stats", &set_stats, nb::arg("on"),
          "Records every pool run's item CPU times (benchmarks; one caller at a time)");
    m.def("thread_pool_stats", &stats_take,
          "(item CPU ns, item worker, per-worker CPU ns inside runs, items per run, callers' CPU ns inside runs) recorded "
          "since the last call; resets");
    m.def("thread_pool_selftest", &selftest, nb::arg("threads"), nb::arg("items"), nb::arg("throw_at") = -1,
          nb::arg("work_ns") = 0, "The worker that ran each item of a pool call (tests)");
}
