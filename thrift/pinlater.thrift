// The PinLater wire contract.
//
// This file is the single source of truth for the protocol. The server loads it at run time
// (the Rust extension embeds it at compile time, see rust/lib.rs), and the tests generate an
// independent client from it with Apache Thrift's compiler. No generated code is committed.
//
// Field ids, types, names and defaults are wire-compatible with Pinterest's original PinLater:
// never change them. New capabilities go in as new methods or new optional fields with new ids.

namespace py pinlater_thrift
namespace java com.pinterest.pinlater.thrift

enum ErrorCode {
  // The caller's fault (4xx).
  CONTINUATION_INVALID = 400,
  PASSWORD_INVALID = 403,
  QUEUE_NAME_INVALID = 410,
  QUEUE_NAME_TOO_LONG = 411,
  QUEUE_NOT_FOUND = 413,
  PRIORITY_NOT_SUPPORTED = 416,
  DEQUEUE_RATE_LIMITED = 429,
  ENQUEUE_REJECTED = 430,

  // The server's or the storage's fault (5xx).
  UNKNOWN = 500,
  NO_HEALTHY_SHARDS = 501,
  SHARD_CONNECTION_FAILED = 502,
}

// PENDING -> (dequeue) IN_PROGRESS -> (ack success) SUCCEEDED
//                                  -> (ack failure, attempts left) PENDING after the retry delay
//                                  -> (ack failure, none left) FAILED
// IN_PROGRESS past the claim timeout is resurrected like a failure.
// SUCCEEDED and FAILED jobs are garbage-collected after their TTLs.
enum PinLaterJobState {
  PENDING = 0,
  IN_PROGRESS = 1,
  SUCCEEDED = 2,
  FAILED = 3,
}

const string CONTINUATION_START = "0"
const string CONTINUATION_END = "-1"

// One job. Priority 1 is the highest. A job without runAfterTimestampMillis, or with 0 there (as
// the original's Redis backend read it), is due at once, queued behind the jobs before it.
// numAttemptsAllowed counts the first attempt too.
//
// pinlater extensions (6-8; original servers and clients skip them):
// dedupKey: while a job of the queue with this key is PENDING (now or later) or IN_PROGRESS, an
//   enqueue of another job with it creates nothing and answers that job's descriptor, with
//   deduplicated true at its position. At most 1,024 bytes (UTF-8), not empty. Each key is
//   checked on one shard picked from the shard set: while servers disagree on that set, or
//   after a shard is added, removed or made dequeueOnly, a key whose live job is on the shard
//   it was picked from before may get a second job.
// dedupWindowMillis: with a dedupKey, the key also stays held until this long after the holding
//   job's enqueue, even once it has finished. 0 or more; more than 0 needs a dedupKey.
// groupKey: ordered groups (FIFO per key): the queue's jobs with one groupKey are handed out in
//   enqueue order, whatever their priorities, at most the queue's groupConcurrency (queue config,
//   default 1) IN_PROGRESS at once; the next only after the one before it succeeded, failed for
//   good or was deleted (a retried or timed-out job keeps its place at the head). At most 1,024
//   bytes (UTF-8), not empty. A group lives on one shard picked as a dedupKey's is; with both
//   keys, the dedupKey is checked there. A shard whose store cannot keep groups (MySQL; Redis in
//   the original layout) refuses the job with ENQUEUE_REJECTED naming the feature.
//
// pinlater extension (9): expireAtTimestampMillis: a job still PENDING at this time is never
//   handed out; it becomes FAILED with no attempts left and "expired" appended to its custom
//   status (by the dequeue that meets it, or by the monitor), counted per queue in /metrics. A
//   failed attempt whose retry would run at or after it expires the job too. retryFailedJobs
//   clears it. 0 or more.
struct PinLaterJob {
  1: required binary body;
  2: optional byte priority = 1;
  3: optional i64 runAfterTimestampMillis;
  4: optional i32 numAttemptsAllowed = 2;
  5: optional string customStatus = "";
  6: optional string dedupKey;
  7: optional i64 dedupWindowMillis = 0;
  8: optional string groupKey;
  9: optional i64 expireAtTimestampMillis;
}

struct PinLaterEnqueueRequest {
  1: required string queueName;
  2: required list<PinLaterJob> jobs;
}

// One descriptor per job, in the order the jobs were sent.
// deduplicated (pinlater extension): parallel to jobDescriptors, true where the job was not
// created because its dedupKey was held (the descriptor is the holder's); absent: none was.
struct PinLaterEnqueueResponse {
  1: required list<string> jobDescriptors;
  2: optional list<bool> deduplicated;
}

// retryDelayMillis applies to failure acks of jobs that have attempts left.
struct PinLaterJobAckInfo {
  1: required string jobDescriptor;
  2: optional string appendCustomStatus = "";
  3: optional i64 retryDelayMillis = 0;
}

struct PinLaterJobAckRequest {
  1: required string queueName;
  2: optional list<PinLaterJobAckInfo> jobsSucceeded;
  3: optional list<PinLaterJobAckInfo> jobsFailed;
}

// coverage < 1.0 looks at only that fraction of the shards; dryRun claims nothing.
// jobAckRequest, when set, is applied before the dequeue.
// waitMillis (pinlater extension; original servers ignore it): when no job is ready, wait up to
// this long for one instead of returning empty at once (long polling). 0 or unset: no wait.
struct PinLaterDequeueRequest {
  1: required string queueName;
  2: required i32 limit;
  3: optional PinLaterJobAckRequest jobAckRequest;
  4: optional bool dryRun = false;
  5: optional double coverage = 1.0;
  6: optional i32 waitMillis = 0;
}

struct PinLaterDequeueMetadata {
  1: optional i32 attemptsAllowed;
  2: optional i32 attemptsRemaining;
}

// jobs maps descriptor -> body; jobMetadata maps descriptor -> attempts.
struct PinLaterDequeueResponse {
  1: optional map<string, binary> jobs;
  2: optional map<string, PinLaterDequeueMetadata> jobMetadata;
}

// Applies only while the job is IN_PROGRESS under the caller's claim; otherwise a no-op.
struct PinLaterCheckpointJobRequest {
  1: required string jobDescriptor;
  2: optional string newBody;
  3: optional bool moveToPending = false;
  4: optional i64 runAfterTimestampMillis;
  5: optional i32 numOfAttemptsAllowed;
  6: optional string prependCustomStatus;
}

struct PinLaterCheckpointJobsRequest {
  1: required string queueName;
  2: required list<PinLaterCheckpointJobRequest> requests;
}

struct PinLaterLookupJobRequest {
  1: required list<string> jobDescriptors;
  2: optional bool includeBody = false;
}

// Field 10 was added after 3..9 in the original; the ids, not the order, are the contract.
struct PinLaterJobInfo {
  1: required string jobDescriptor;
  2: required PinLaterJobState jobState;
  10: required i32 attemptsAllowed;
  3: required i32 attemptsRemaining;
  4: required string customStatus;
  5: required i64 createdAtTimestampMillis;
  6: optional i64 runAfterTimestampMillis;
  7: optional i64 updatedAtTimestampMillis;
  8: optional string claimDescriptor;
  9: optional binary body;
  // pinlater extensions: the job's keys (see PinLaterJob), absent when it has none.
  11: optional string dedupKey;
  12: optional string groupKey;
  // pinlater extension: the job's expireAtTimestampMillis, absent when it has none.
  13: optional i64 expireAtTimestampMillis;
}

// Counts jobs in one state, over all priorities unless one is given. Only jobs whose runAfter
// has passed are counted, unless countFutureJobs, which counts only the others.
struct PinLaterGetJobCountRequest {
  1: required string queueName;
  2: required PinLaterJobState jobState;
  3: optional byte priority;
  4: optional bool countFutureJobs = false;
  5: optional string bodyRegexToMatch;
}

// Returns up to limit jobs (without bodies), newest runAfter first. The reply's continuation
// (pinlater extension; the original accepted only CONTINUATION_START) resumes the scan after the
// last job returned when sent back with the same queue, state, priority, scanFutureJobs and
// bodyRegexToMatch; it is CONTINUATION_END when nothing is left. A job that stays in the scanned
// state during the whole scan is returned exactly once. Any other string is CONTINUATION_INVALID.
struct PinLaterScanJobsRequest {
  1: required string queueName;
  2: required PinLaterJobState jobState;
  3: optional byte priority;
  4: optional bool scanFutureJobs = false;
  5: optional string continuation = CONTINUATION_START;
  6: optional i32 limit = 100;
  7: optional string bodyRegexToMatch;
}

struct PinLaterScanJobsResponse {
  1: required list<PinLaterJobInfo> scannedJobs;
  2: optional string continuation = CONTINUATION_END;
}

struct PinLaterRetryFailedJobsRequest {
  1: required string queueName;
  2: optional byte priority = 1;
  3: optional i32 attemptsToAllow = 1;
  4: optional i64 runAfterTimestampMillis;
  5: optional i32 limit = 1000;
}

struct PinLaterDeleteJobsRequest {
  1: required string queueName;
  2: required PinLaterJobState jobState;
  3: optional byte priority = 1;
  4: optional string bodyRegexToMatch;
  5: optional i32 limit = 1000;
}

// pinlater extension (cancelJobs): the jobs of one queue to cancel, by descriptor.
struct PinLaterCancelJobsRequest {
  1: required string queueName;
  2: required list<string> jobDescriptors;
}

// pinlater extension (upsertSchedule, listSchedules): a job enqueued into queueName at each tick
// of cron (five fields: minute hour day-of-month month day-of-week, UTC; lists, ranges, steps
// and names as in crontab) or every intervalMillis, exactly one of the two. Exactly one job per
// tick however many servers run; a tick missed while no server ran is enqueued once, at start.
// The job may not carry runAfterTimestampMillis, dedupKey, dedupWindowMillis or
// expireAtTimestampMillis (each tick's job has a dedupKey of its own).
struct PinLaterSchedule {
  1: required string queueName;
  2: required string name;
  3: optional string cron;
  4: optional i64 intervalMillis;
  5: required PinLaterJob job;
  6: optional bool paused = false;
  7: optional i64 nextRunTimestampMillis;
}

exception PinLaterException {
  1: required ErrorCode errorCode;
  2: required string message;
}

// source is "service:hostname" of the caller; it also scopes checkpoint claims.
struct RequestContext {
  1: required string source;
  2: optional string requestId = "";
}

service PinLater {
  // Idempotent. Names are letters, digits and underscores.
  void createQueue(1: RequestContext context, 2: string name) throws (1: PinLaterException e);

  // Idempotent; needs the admin password.
  void deleteQueue(1: RequestContext context, 2: string name, 3: string password)
      throws (1: PinLaterException e);

  PinLaterEnqueueResponse enqueueJobs(1: RequestContext context, 2: PinLaterEnqueueRequest request)
      throws (1: PinLaterException e);

  PinLaterDequeueResponse dequeueJobs(1: RequestContext context, 2: PinLaterDequeueRequest request)
      throws (1: PinLaterException e);

  void ackDequeuedJobs(1: RequestContext context, 2: PinLaterJobAckRequest request)
      throws (1: PinLaterException e);

  void checkpointJobs(1: RequestContext context, 2: PinLaterCheckpointJobsRequest request)
      throws (1: PinLaterException e);

  // Jobs that are not found are left out of the map.
  map<string, PinLaterJobInfo> lookupJobs(1: RequestContext context, 2: PinLaterLookupJobRequest request)
      throws (1: PinLaterException e);

  i32 getJobCount(1: RequestContext context, 2: PinLaterGetJobCountRequest request)
      throws (1: PinLaterException e);

  set<string> getQueueNames(1: RequestContext context) throws (1: PinLaterException e);

  PinLaterScanJobsResponse scanJobs(1: RequestContext context, 2: PinLaterScanJobsRequest request)
      throws (1: PinLaterException e);

  i32 retryFailedJobs(1: RequestContext context, 2: PinLaterRetryFailedJobsRequest request)
      throws (1: PinLaterException e);

  i32 deleteJobs(1: RequestContext context, 2: PinLaterDeleteJobsRequest request)
      throws (1: PinLaterException e);

  // pinlater extensions (original servers answer UNKNOWN_METHOD).

  // Cancels jobs; returns how many changed. A PENDING job becomes FAILED with no attempts left
  // and "cancelled" appended to its custom status; an IN_PROGRESS job gets no further attempt (a
  // failure ack or claim timeout ends it FAILED the same way; a success ack still counts).
  // Finished and unknown jobs are left alone; a descriptor of another queue is an error.
  i32 cancelJobs(1: RequestContext context, 2: PinLaterCancelJobsRequest request)
      throws (1: PinLaterException e);

  // Creates or replaces the schedule (queueName, name). A bad cron expression, or both or
  // neither of cron and intervalMillis, is ENQUEUE_REJECTED with the reason.
  void upsertSchedule(1: RequestContext context, 2: PinLaterSchedule schedule)
      throws (1: PinLaterException e);

  // QUEUE_NOT_FOUND for an unknown queue; an unknown name is a no-op.
  void deleteSchedule(1: RequestContext context, 2: string queueName, 3: string name)
      throws (1: PinLaterException e);

  // The queue's schedules, by name, with nextRunTimestampMillis set.
  list<PinLaterSchedule> listSchedules(1: RequestContext context, 2: string queueName)
      throws (1: PinLaterException e);
}
