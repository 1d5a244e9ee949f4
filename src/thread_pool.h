// A persistent pool of helper threads for the native kernels (one per process, created on
// first use and grown to the largest count asked for): helpers park between calls (a short
// spin, then a condition variable), so a dispatch costs a wake-up, not a thread creation.
//
// run(threads, items, fn, ctx) calls fn(ctx, worker, i) once for every i < items, on the
// calling thread (worker 0) and up to threads - 1 helpers (workers 1 .. threads - 1, numbered
// by the order they join this call), which claim items from a shared counter; it returns when
// every item is done. One call uses the pool at a time: a call made while another holds it
// (a second Python thread, a second session, a kernel called from a worker) runs all its items
// on its own thread, so calls never wait for each other and never deadlock. The first
// exception thrown by fn (on any worker) stops the claiming of further items and is rethrown
// by run on the calling thread. After fork() the child starts with an empty pool (the parent's
// helpers do not exist there) and creates its own on first use; shutdown() stops and joins the
// helpers (Python's atexit calls it; a later threaded call starts new ones).
#pragma once

#include <cstdint>

namespace onnx_light_pool {

using ItemFn = void (*)(const void *ctx, int worker, int64_t item);

void run(int threads, int64_t items, ItemFn fn, const void *ctx);

// fn(worker, i) for every i < items through run(): on this thread alone when threads or items
// are below 2 (no call into the pool)
template <class Fn>
void parallel_items(int threads, int64_t items, const Fn &fn) {
    if (threads <= 1 || items <= 1) {
        for (int64_t i = 0; i < items; ++i) fn(0, i);
        return;
    }
    run(threads, items, [](const void *ctx, int worker, int64_t i) { (*static_cast<const Fn *>(ctx))(worker, i); },
        &fn);
}

// the number of helper threads alive now (0 before the first threaded call and after shutdown)
int helpers();

// stops and joins every helper (waiting for a call in progress); a later threaded call starts new ones
void shutdown();

// Measurement (benchmarks/bench_threads.py --layers): while on, every run() (threaded or
// not) records each item's thread CPU time, which worker ran it, and each worker's CPU
// time inside the run; one caller at a time (a concurrent call's items are not recorded).
void set_stats(bool on);

// how long an idle helper polls for the next call before it sleeps (microseconds, >= 0)
void set_spin_us(int us);
int spin_us();

}  // namespace onnx_light_pool
