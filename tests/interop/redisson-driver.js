#!/usr/bin/env node
// Line-oriented driver for node-redisson (npm node-redisson@1.0.4 + ioredis@5), meant to be run by a
// test harness as a separate process that "speaks Redisson" on a lock.
//
// Usage: node redisson-driver.js --port 23817 [--host 127.0.0.1] [--cluster h:p,h:p..]
//                       [--name interop:test] [--client-id 1]
//                       [--watchdog-ms 30000] [--wait robust|native] [--sub classic|sharded|both]
// stdin, one command per line; every command gets exactly one JSON line on stdout:
//   lock [leaseMs]             wait forever; no leaseMs = watchdog (renews every watchdog-ms/3)
//   trylock waitMs [leaseMs]   waitMs < 0 = forever; result true/false
//   unlock | forceunlock | islocked | info (HGETALL + PTTL) | quit
// --wait native : use node-redisson's own tryLock/lock waiting (has bugs, see report)
// --wait robust : (default) single attempts via lock.tryLock(0, ...) + own SUBSCRIBE/SSUBSCRIBE wait,
//                 bounded by the lock's PTTL, re-attempt after every wake-up or timeout.
const { Redisson, TimeUnit } = require('node-redisson');
const Redis = require('ioredis');
const readline = require('node:readline');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const conn = { host: args.host || '127.0.0.1', port: Number(args.port || 6379) };
const name = args.name || 'interop:test';
const waitMode = args.wait || 'robust';
const subMode = args.sub || 'classic';
// --cluster: node-redisson's cluster mode (an ioredis Cluster; classic pub/sub only).
const clusterNodes = args.cluster
  ? args.cluster.split(',').map((s) => { const [host, port] = s.split(':'); return { host, port: Number(port) }; })
  : null;
const redisConfig = clusterNodes ? { clusters: clusterNodes, options: {} } : { options: conn };
const redisson = new Redisson({ redis: redisConfig, lockWatchdogTimeout: BigInt(args['watchdog-ms'] || 30000) });
const lock = redisson.getLock(name, args['client-id']);          // hash field = <per-process uuid>:<clientId>
const field = `${redisson.commandExecutor.id}:${lock.clientId}`; // TS-private, readable from JS
const channel = lock.getChannelName();                            // redisson_lock__channel:{name}
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const ms = TimeUnit.MILLISECONDS;

// ---- robust waiting -------------------------------------------------------
let sub = null, gen = 0, wake = null;
async function subscribe() {
  if (!sub) {
    sub = clusterNodes ? new Redis.Cluster(clusterNodes) : new Redis(conn);
    const onMsg = (ch) => { if (ch === channel) { gen++; if (wake) wake(); } };
    sub.on('message', onMsg); sub.on('smessage', onMsg);
  }
  if (subMode !== 'sharded') await sub.subscribe(channel);
  if (subMode !== 'classic') await sub.ssubscribe(channel);
}
async function unsubscribe() {
  if (subMode !== 'sharded') await sub.unsubscribe(channel);
  if (subMode !== 'classic') await sub.sunsubscribe(channel);
}
function waitFor(t, seen) {           // resolves on a message newer than `seen`, or after t ms
  if (gen !== seen) return Promise.resolve();
  return new Promise((res) => {
    const timer = setTimeout(() => { wake = null; res(); }, t);
    wake = () => { clearTimeout(timer); wake = null; res(); };
  });
}
async function acquire(waitMs, leaseMs) {          // waitMs null = forever; leaseMs null = watchdog
  const lease = leaseMs == null ? true : leaseMs;
  if (await lock.tryLock(0, lease, ms)) return true; // tryLock(0, ..) = one EVAL, no subscribe
  const deadline = waitMs == null ? Infinity : Date.now() + waitMs;
  await subscribe();                                  // subscribe first, then re-try: no lost wake-up
  try {
    for (;;) {
      const seen = gen;
      if (await lock.tryLock(0, lease, ms)) return true;
      const remaining = deadline - Date.now();
      if (remaining <= 0) return false;
      const pttl = await redisson.redis.pttl(name);  // -1: no expiry, -2: gone
      let t = Math.min(remaining, 2 ** 31 - 1);
      if (pttl >= 0 && pttl < t) t = pttl;
      if (pttl === -2) t = Math.min(t, 10);
      await waitFor(Math.max(t, 1), seen);
    }
  } finally { await unsubscribe(); }
}

// ---- command loop ---------------------------------------------------------
out({ event: 'ready', pid: process.pid, name, field, channel, wait: waitMode, sub: subMode });
const rl = readline.createInterface({ input: process.stdin, terminal: false });
let chain = Promise.resolve();
async function shutdown() { try { if (sub) sub.disconnect(); await redisson.quit(); } finally { process.exit(0); } }
rl.on('line', (line) => {
  const [cmd, a1, a2] = line.trim().split(/\s+/);
  if (!cmd) return;
  chain = chain.then(async () => {
    const t0 = Date.now();
    try {
      let res;
      switch (cmd) {
        case 'lock':
          if (waitMode === 'native') { a1 ? await lock.lock(Number(a1), ms) : await lock.lock(); res = true; }
          else res = await acquire(null, a1 ? Number(a1) : null);
          break;
        case 'trylock': {
          const w = Number(a1 ?? 0), lease = a2 ? Number(a2) : null;
          if (waitMode === 'native') res = await lock.tryLock(w < 0 ? false : w, lease ?? true, ms);
          else res = await acquire(w < 0 ? null : w, lease);
          break;
        }
        case 'unlock': await lock.unlock(); res = true; break;
        case 'forceunlock': res = await lock.forceUnlock(); break;
        case 'islocked': res = await lock.isLocked(); break;
        case 'info': res = { hash: await redisson.redis.hgetall(name), pttl: await redisson.redis.pttl(name) }; break;
        case 'quit': out({ cmd, ok: true }); return shutdown();
        default: throw new Error('unknown command ' + cmd);
      }
      out({ cmd, ok: true, result: res, ms: Date.now() - t0 });
    } catch (e) {
      out({ cmd, ok: false, error: String(e && e.message).split('\n')[0], ms: Date.now() - t0 });
    }
  });
});
rl.on('close', () => { chain = chain.then(shutdown); });
