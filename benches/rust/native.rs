//! Criterion benches of the native hot path, without Python: descriptor batches of 100 and the
//! rate-limit decision (goal: well under 1 µs, including the clock read and the mutex the Python
//! binding takes).

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Instant;

use _pinlater::broker::{BufferedJob, JobBuffer};
use _pinlater::descriptor;
use _pinlater::ratelimit::RateLimiter;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const BATCH: u64 = 100;

fn descriptors(c: &mut Criterion) {
    let priorities: Vec<i64> = (0..100_i64).map(|i| i % 3 + 1).collect();
    let local_ids: Vec<u64> = (0..BATCH).map(|i| 1_000_000_000 + i * 7_919).collect();
    let encoded = descriptor::encode_batch("test_queue", "1d1", &priorities, &local_ids).unwrap();

    let mut group = c.benchmark_group("descriptor");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("encode_batch_100", |b| {
        b.iter(|| {
            descriptor::encode_batch(
                black_box("test_queue"),
                black_box("1d1"),
                black_box(&priorities),
                black_box(&local_ids),
            )
        });
    });
    group.bench_function("decode_batch_100", |b| {
        b.iter(|| descriptor::decode_batch(black_box(&encoded).iter().map(String::as_str)));
    });
    group.finish();
}

fn rate_limit(c: &mut Criterion) {
    let mut group = c.benchmark_group("ratelimit");
    let mut limiter = RateLimiter::new(1.0).unwrap();
    for i in 0..100 {
        limiter
            .set_rate(&format!("queue_{i}"), 1e9, Instant::now())
            .unwrap();
    }
    let now = Instant::now();
    group.bench_function("try_acquire_fixed_clock", |b| {
        b.iter(|| limiter.try_acquire(black_box("queue_42"), black_box(1), now));
    });
    group.bench_function("try_acquire_unlimited_queue", |b| {
        b.iter(|| limiter.try_acquire(black_box("free"), black_box(1), now));
    });
    // What the Python binding does per call: lock, read the clock, decide.
    let shared = Mutex::new(limiter);
    group.bench_function("try_acquire_mutex_and_clock", |b| {
        b.iter(|| {
            shared
                .lock()
                .unwrap()
                .try_acquire(black_box("queue_42"), black_box(1), Instant::now())
        });
    });
    group.finish();
}

/// The broker buffer: refill 1000 jobs over three priorities, then take them in batches of 100
/// (what one worker dequeue does under the buffer's mutex).
fn broker_buffer(c: &mut Criterion) {
    let jobs = |priority: i64| {
        (0..334_i64).map(move |i| BufferedJob {
            shard: "1".to_owned(),
            priority,
            local_id: i,
            body: vec![0_u8; 64],
            attempts_allowed: 2,
            attempts_remaining: 2,
            reserved_at_ms: 0,
        })
    };
    let mut group = c.benchmark_group("broker");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("take_100_of_1000", |b| {
        b.iter_batched(
            || {
                let mut buffer = JobBuffer::new(1002);
                for p in 1..=3 {
                    buffer.push(jobs(p));
                }
                buffer
            },
            |mut buffer| black_box(buffer.take(100)),
            criterion::BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, descriptors, rate_limit, broker_buffer);
criterion_main!(benches);
