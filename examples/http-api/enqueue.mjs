// Enqueue a Conveyor job over the HTTP API from Node.js (18 or later: built-in fetch),
// optionally waiting for it to finish. See docs/http-api.md.
//
//   CONVEYOR_API_URL=http://127.0.0.1:8787 CONVEYOR_API_TOKEN=... \
//     node enqueue.mjs send_email '["ada@example.com"]' '{"subject": "Welcome"}' [--wait 30]
//
// Prints the job as JSON (the finished job with --wait). Exit 0 when it was enqueued (and,
// with --wait, completed), 1 when the API refused or the job failed, 2 on bad usage.

const base = (process.env.CONVEYOR_API_URL ?? "http://127.0.0.1:8787").replace(/\/$/, "");
const token = process.env.CONVEYOR_API_TOKEN;
const argv = process.argv.slice(2);
const waitAt = argv.indexOf("--wait");
const wait = waitAt >= 0 ? Number(argv.splice(waitAt, 2)[1]) : null;
const [task, args = "[]", kwargs = "{}"] = argv;
if (!token || !task || (wait !== null && !(wait >= 0))) {
  console.error("usage: CONVEYOR_API_TOKEN=... node enqueue.mjs TASK [ARGS_JSON] [KWARGS_JSON] [--wait SECONDS]");
  process.exit(2);
}
const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };

async function call(method, path, body) {
  const response = await fetch(`${base}/api/v1${path}`, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

const made = await call("POST", "/jobs", { task, args: JSON.parse(args), kwargs: JSON.parse(kwargs) });
if (made.status !== 201) {
  console.error(`${made.status} ${made.body.error}: ${made.body.message}`);
  process.exit(1);
}
let job = made.body;
if (wait !== null) {
  // A long poll: the server answers as soon as the job is final (408 if it is not in time).
  const done = await call("GET", `/jobs/${job.id}/wait?timeout=${wait}`);
  if (done.status !== 200) {
    console.error(`${done.status} ${done.body.error}: ${done.body.message}`);
    process.exit(1);
  }
  job = done.body;
}
console.log(JSON.stringify(job));
process.exit(wait === null || job.state === "completed" ? 0 : 1);
