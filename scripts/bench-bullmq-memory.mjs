#!/usr/bin/env node
// Redis memory per retained completed BullMQ job, measured the way tests/benches/e2e.rs
// measures a retained taskcluster task, so that scripts/bench-report can show a ratio:
// INFO memory used_memory just before the first job is added and again once every job has
// completed, kept (removeOnComplete: false), divided by the number of jobs. The job data is
// {i: n} and the processor returns it, like our `echo` task with input {"i": n}.
//
// (The BullMQ anchor's own "keep" phase reads used_memory after preloading its jobs, so its
// figure is only what completing a job adds, not what a retained job costs.)
//
// Uses the bullmq and ioredis that ../shared/bench/bullmq/run.sh installed in BULLMQ_BENCH_DIR
// (default /tmp/bullmq-bench). Env: REDIS_URL (required; never port 6379), JOBS (10000),
// CONCURRENCY (64), CHUNK (1000), BENCH_OUT (JSON file). Everything it creates is under the
// prefix `bullmem` and is removed at the end.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const env = process.env;
const dir = env.BULLMQ_BENCH_DIR || '/tmp/bullmq-bench';
const require = createRequire(path.join(dir, 'package.json'));
const { Queue, Worker } = require('bullmq');
const IORedis = require('ioredis');

const JOBS = Number(env.JOBS || 10000);
const CONCURRENCY = Number(env.CONCURRENCY || 64);
const CHUNK = Number(env.CHUNK || 1000);
if (!env.REDIS_URL) {
  console.error('REDIS_URL is required');
  process.exit(2);
}
const url = new URL(env.REDIS_URL);
const port = Number(url.port || 6379);
if (port === 6379) {
  console.error('refusing port 6379: use a private redis-server');
  process.exit(2);
}
const connection = { host: url.hostname, port, maxRetriesPerRequest: null };

const usedMemory = async admin => {
  const text = await admin.info('memory');
  const line = text.split(/\r?\n/).find(l => l.startsWith('used_memory:'));
  return Number(line.split(':')[1]);
};

const admin = new IORedis(connection);
const name = `mem-${process.pid}`;
const queue = new Queue(name, { connection, prefix: 'bullmem' });
await queue.waitUntilReady();
const before = await usedMemory(admin);

let worker;
try {
  const opts = { removeOnComplete: false, removeOnFail: false };
  for (let k = 0; k < JOBS; k += CHUNK) {
    const jobs = [];
    for (let i = k; i < Math.min(JOBS, k + CHUNK); i++) jobs.push({ name: 'echo', data: { i }, opts });
    await queue.addBulk(jobs);
  }
  worker = new Worker(name, async job => job.data, { connection, prefix: 'bullmem', concurrency: CONCURRENCY });
  const deadline = Date.now() + 300_000;
  for (;;) {
    const counts = await queue.getJobCounts('completed', 'failed');
    if (counts.completed + counts.failed >= JOBS) break;
    if (Date.now() > deadline) throw new Error(`only ${counts.completed} of ${JOBS} jobs completed`);
    await new Promise(r => setTimeout(r, 100));
  }
  await worker.close();
  worker = undefined;
  // Let the last event-stream writes land; they are part of what BullMQ keeps.
  await new Promise(r => setTimeout(r, 500));
  const after = await usedMemory(admin);
  const counts = await queue.getJobCounts('completed', 'failed');
  const result = {
    bullmq: require('bullmq/package.json').version,
    jobs: JOBS,
    completed: counts.completed,
    failed: counts.failed,
    concurrency: CONCURRENCY,
    used_memory_before: before,
    used_memory_after: after,
    bytes_per_job: (after - before) / JOBS,
  };
  console.log(JSON.stringify(result));
  if (env.BENCH_OUT) fs.writeFileSync(env.BENCH_OUT, JSON.stringify(result, null, 2));
} finally {
  if (worker) await worker.close();
  await queue.obliterate({ force: true }).catch(() => {});
  await queue.close();
  await admin.quit();
}
