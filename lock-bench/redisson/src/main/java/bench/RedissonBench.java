package bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;
import org.redisson.config.SingleServerConfig;
import org.redisson.config.TransportMode;

/**
 * lock-bench's Redisson driver: Redisson's {@link RLock} (and its fair lock)
 * through the workloads of lock-bench, with the same parameters, printing raw
 * samples that lock-bench turns into the same figures as for its other
 * contenders.
 *
 * <p>Two settings, the first argument after the mode:
 *
 * <ul>
 *   <li>{@code default}: {@code Config.useSingleServer().setAddress(url)} and
 *       nothing else (connection pool 64, minimum idle 24, 32 Netty threads,
 *       NIO transport, {@code lockWatchdogTimeout} 30 s); locks are taken
 *       without a lease time, so the watchdog keeps them (as distlock's
 *       contender does).
 *   <li>{@code fast}: the documented speed settings: an explicit lease time
 *       (30 s, as rslock's and the floor's), which skips the watchdog;
 *       {@code TransportMode.EPOLL} (Netty's native transport); the minimum
 *       idle connections raised to the pool size (64), so that every
 *       connection is open before measuring; {@code useScriptCache(true)}
 *       (EVALSHA; already the default in 4.x); {@code nettyThreads(0)}
 *       (documented as cores x 2: 2 threads on the one CPU the driver is
 *       pinned to, instead of 32).
 * </ul>
 *
 * <p>Modes:
 *
 * <ul>
 *   <li>{@code server URL SETTINGS WARMUP}: connects, warms the JIT up
 *       ({@link #warmUp}), prints {@code ready}, then reads commands from
 *       stdin, one a line. Each command runs in two phases: the driver
 *       prepares (warm-up cycles, the key's first acquisition), prints
 *       {@code prepared} and waits for a {@code go} line (lock-bench resets
 *       Redis's statistics and starts its CPU meter in between), then
 *       measures and prints data lines ({@code NAME v1 v2 ...}) and
 *       {@code end}, or {@code error MESSAGE}. Commands:
 *       {@code w1 CYCLES WARMUP}, {@code w2 TASKS MILLIS [sync]} (async
 *       API by default, one thread per task with {@code sync}),
 *       {@code contended plain|fair KEY WORKERS ACQUISITIONS HOLD_US WORK_US},
 *       {@code quit}.
 *   <li>{@code w3h-child URL SETTINGS WARMUP PROCESS WORKERS TOTAL HOLD_US
 *       WORK_US KEY}: one process of W3h, reporting as lock-bench's own W10
 *       children do (a JSON line of (0, wait, acquired, released) per
 *       acquisition, times in microseconds of the system clock).
 * </ul>
 */
public final class RedissonBench {
    private static final long LEASE_MS = 30_000;
    private static final long WAIT_MS = 30_000;
    private static final String TICKETS = "bench:w10:tickets";
    private static final String GO = "bench:w10:go";

    private static final PrintStream OUT =
            new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false, StandardCharsets.UTF_8);

    private final RedissonClient redisson;
    private final boolean fast;

    private RedissonBench(RedissonClient redisson, boolean fast) {
        this.redisson = redisson;
        this.fast = fast;
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: server|w3h-child URL default|fast WARMUP ...");
            System.exit(2);
        }
        String mode = args[0];
        boolean fast = switch (args[2]) {
            case "default" -> false;
            case "fast" -> true;
            default -> throw new IllegalArgumentException("settings: default or fast, not " + args[2]);
        };
        int warmup = Integer.parseInt(args[3]);
        Config config = config(args[1], fast);
        System.err.println("# redisson driver: " + describe(config, fast));
        RedissonClient redisson = Redisson.create(config);
        RedissonBench bench = new RedissonBench(redisson, fast);
        try {
            switch (mode) {
                case "server" -> {
                    bench.warmUp(warmup);
                    say("ready");
                    bench.serve();
                }
                case "w3h-child" -> {
                    bench.warmUp(warmup);
                    bench.w3hChild(
                            Integer.parseInt(args[4]),
                            Integer.parseInt(args[5]),
                            Long.parseLong(args[6]),
                            Long.parseLong(args[7]),
                            Long.parseLong(args[8]),
                            args[9]);
                }
                default -> throw new IllegalArgumentException("mode: server or w3h-child, not " + mode);
            }
        } finally {
            redisson.shutdown();
        }
    }

    /** The two settings (see the class comment). */
    static Config config(String url, boolean fast) {
        Config config = new Config();
        SingleServerConfig single = config.useSingleServer().setAddress(url);
        if (fast) {
            config.setTransportMode(TransportMode.EPOLL);
            config.setNettyThreads(0);
            config.setUseScriptCache(true);
            single.setConnectionMinimumIdleSize(single.getConnectionPoolSize());
        }
        return config;
    }

    static String describe(Config config, boolean fast) {
        SingleServerConfig single = config.useSingleServer();
        return String.format(
                "Redisson %s, %s settings: transport %s, nettyThreads %d, connectionPoolSize %d,"
                        + " connectionMinimumIdleSize %d, useScriptCache %b, lockWatchdogTimeout %d ms,"
                        + " lease %s, CPUs visible to the JVM %d",
                Redisson.class.getPackage().getImplementationVersion(),
                fast ? "fast" : "default",
                config.getTransportMode(),
                config.getNettyThreads(),
                single.getConnectionPoolSize(),
                single.getConnectionMinimumIdleSize(),
                config.isUseScriptCache(),
                config.getLockWatchdogTimeout(),
                fast ? LEASE_MS + " ms (no watchdog)" : "none (watchdog)",
                Runtime.getRuntime().availableProcessors());
    }

    // ---- the lock calls of each setting ----

    /** One attempt, no waiting. */
    private boolean tryNow(RLock lock) throws InterruptedException {
        return fast ? lock.tryLock(0, LEASE_MS, TimeUnit.MILLISECONDS) : lock.tryLock();
    }

    /** Waits up to {@code waitMs} for the lock. */
    private boolean tryWait(RLock lock, long waitMs) throws InterruptedException {
        return fast
                ? lock.tryLock(waitMs, LEASE_MS, TimeUnit.MILLISECONDS)
                : lock.tryLock(waitMs, TimeUnit.MILLISECONDS);
    }

    private void cycle(RLock lock) throws InterruptedException {
        if (!tryNow(lock)) {
            throw new IllegalStateException("uncontended lock " + lock.getName() + " was busy");
        }
        lock.unlock();
    }

    private RLock lock(String kind, String key) {
        return switch (kind) {
            case "plain" -> redisson.getLock(key);
            case "fair" -> redisson.getFairLock(key);
            default -> throw new IllegalArgumentException("lock kind: plain or fair, not " + kind);
        };
    }

    // ---- JIT warm-up ----

    /**
     * Runs every code path the workloads take, so that the JIT has compiled
     * them before anything is measured: {@code cycles} sequential
     * acquire + release cycles (W1's path), the same number spread over 64
     * threads on 64 keys (W2's), and 200 contended acquisitions by 16
     * threads on a plain and on a fair lock without a hold (the waiting and
     * wake-up paths of W3, W3h and W7). The keys are deleted afterwards.
     */
    void warmUp(int cycles) throws Exception {
        if (cycles <= 0) {
            return;
        }
        long started = System.nanoTime();
        RLock one = redisson.getLock("bench:warmup:0");
        for (int i = 0; i < cycles; i++) {
            cycle(one);
        }
        int threads = 64;
        runThreads(threads, t -> {
            RLock mine = redisson.getLock("bench:warmup:w2:" + t);
            for (int i = 0; i < cycles / threads; i++) {
                cycle(mine);
            }
        });
        for (String kind : List.of("plain", "fair")) {
            AtomicInteger left = new AtomicInteger(200);
            runThreads(16, t -> {
                RLock lock = lock(kind, "bench:warmup:" + kind);
                while (left.getAndDecrement() > 0) {
                    if (!tryWait(lock, WAIT_MS)) {
                        throw new IllegalStateException("warm-up: timed out");
                    }
                    lock.unlock();
                }
            });
        }
        redisson.getKeys().deleteByPattern("bench:warmup:*");
        System.err.printf(
                "# redisson driver: JIT warm-up (%d + %d cycles, 2 x 200 contended) took %.1f s%n",
                cycles, cycles / threads * threads, (System.nanoTime() - started) / 1e9);
    }

    // ---- the command loop ----

    private void serve() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split("\\s+");
            if (cmd[0].isEmpty()) {
                continue;
            }
            if (cmd[0].equals("quit")) {
                return;
            }
            try {
                switch (cmd[0]) {
                    case "w1" -> w1(in, Integer.parseInt(cmd[1]), Integer.parseInt(cmd[2]));
                    case "w2" -> {
                        if (cmd.length > 3 && cmd[3].equals("sync")) {
                            w2(in, Integer.parseInt(cmd[1]), Long.parseLong(cmd[2]));
                        } else {
                            w2Async(in, Integer.parseInt(cmd[1]), Long.parseLong(cmd[2]));
                        }
                    }
                    case "contended" -> contended(
                            in,
                            cmd[1],
                            cmd[2],
                            Integer.parseInt(cmd[3]),
                            Integer.parseInt(cmd[4]),
                            Long.parseLong(cmd[5]),
                            Long.parseLong(cmd[6]));
                    default -> throw new IllegalArgumentException("unknown command " + cmd[0]);
                }
                say("end");
            } catch (Exception e) {
                say("error " + e.toString().replace('\n', ' '));
            }
        }
    }

    /** Ends the preparing phase: says so and waits for {@code go}. */
    private static void prepared(BufferedReader in) throws Exception {
        say("prepared");
        String go = in.readLine();
        if (!"go".equals(go)) {
            throw new IllegalStateException("expected go, got " + go);
        }
    }

    /** W1 (one round): one thread, sequential acquire + release of one key. */
    private void w1(BufferedReader in, int cycles, int warmup) throws Exception {
        RLock lock = redisson.getLock("bench:w1");
        for (int i = 0; i < warmup; i++) {
            cycle(lock);
        }
        prepared(in);
        long[] times = new long[cycles];
        long cpu = cpuNanos();
        long started = System.nanoTime();
        for (int i = 0; i < cycles; i++) {
            long t = System.nanoTime();
            cycle(lock);
            times[i] = System.nanoTime() - t;
        }
        long elapsed = System.nanoTime() - started;
        cpu = cpuNanos() - cpu;
        data("times", times);
        data("elapsed", elapsed);
        data("cpu", cpu);
    }

    /** W2: {@code tasks} threads, each on its own key, acquire + release for {@code millis}. */
    private void w2(BufferedReader in, int tasks, long millis) throws Exception {
        for (int i = 0; i < tasks; i++) {
            cycle(redisson.getLock("bench:w2:" + i));
        }
        prepared(in);
        List<long[]> all = new ArrayList<>();
        long cpu = cpuNanos();
        long started = System.nanoTime();
        long deadline = started + millis * 1_000_000L;
        runThreads(tasks, t -> {
            RLock lock = redisson.getLock("bench:w2:" + t);
            LongList times = new LongList();
            while (System.nanoTime() < deadline) {
                long s = System.nanoTime();
                cycle(lock);
                times.add(System.nanoTime() - s);
            }
            synchronized (all) {
                all.add(times.toArray());
            }
        });
        long elapsed = System.nanoTime() - started;
        cpu = cpuNanos() - cpu;
        LongList times = new LongList();
        for (long[] part : all) {
            for (long t : part) {
                times.add(t);
            }
        }
        data("times", times.toArray());
        data("elapsed", elapsed);
        data("cpu", cpu);
    }

    /**
     * W2 with the async API: {@code tasks} chains, each on its own key and
     * with its own owner id (Redisson's {@code threadId} argument), each
     * starting its next acquire + release when the last one completed, for
     * {@code millis}: the closest equivalent of lock-bench's tasks on one
     * client. No thread per chain: the callbacks run on Netty's threads.
     */
    private void w2Async(BufferedReader in, int tasks, long millis) throws Exception {
        for (int i = 0; i < tasks; i++) {
            cycle(redisson.getLock("bench:w2:" + i));
        }
        prepared(in);
        LongList[] times = new LongList[tasks];
        java.util.concurrent.CompletableFuture<?>[] done = new java.util.concurrent.CompletableFuture<?>[tasks];
        long cpu = cpuNanos();
        long started = System.nanoTime();
        long deadline = started + millis * 1_000_000L;
        for (int t = 0; t < tasks; t++) {
            times[t] = new LongList();
            java.util.concurrent.CompletableFuture<Void> chainDone = new java.util.concurrent.CompletableFuture<>();
            done[t] = chainDone;
            asyncCycle(redisson.getLock("bench:w2:" + t), 1_000_000L + t, deadline, times[t], chainDone);
        }
        java.util.concurrent.CompletableFuture.allOf(done).get();
        long elapsed = System.nanoTime() - started;
        cpu = cpuNanos() - cpu;
        LongList all = new LongList();
        for (LongList part : times) {
            for (long v : part.toArray()) {
                all.add(v);
            }
        }
        data("times", all.toArray());
        data("elapsed", elapsed);
        data("cpu", cpu);
    }

    /** One async acquire + release of {@code lock} as owner {@code owner}, then the next, until {@code deadline}. */
    private void asyncCycle(
            RLock lock, long owner, long deadline, LongList times, java.util.concurrent.CompletableFuture<Void> done) {
        long s = System.nanoTime();
        var acquired = fast
                ? lock.tryLockAsync(0, LEASE_MS, TimeUnit.MILLISECONDS, owner)
                : lock.tryLockAsync(owner);
        acquired.thenCompose(ok -> {
                    if (!ok) {
                        throw new IllegalStateException("uncontended lock " + lock.getName() + " was busy");
                    }
                    return lock.unlockAsync(owner);
                })
                .whenComplete((v, e) -> {
                    if (e != null) {
                        done.completeExceptionally(e);
                        return;
                    }
                    long now = System.nanoTime();
                    times.add(now - s);
                    if (now < deadline) {
                        asyncCycle(lock, owner, deadline, times, done);
                    } else {
                        done.complete(null);
                    }
                });
    }

    /**
     * W3's loop (and W7's): {@code workers} threads on one lock of one
     * client; each acquires (waiting up to 30 s), holds, releases, works,
     * until {@code acquisitions} were made in all. Records the hand-offs
     * (previous holder's release sent -> next holder's acquire returned, when
     * the owner changes), the holds, the waits and the most workers seen
     * inside at once.
     */
    private void contended(
            BufferedReader in, String kind, String key, int workers, int acquisitions, long holdUs, long workUs)
            throws Exception {
        RLock first = lock(kind, key);
        if (!tryWait(first, WAIT_MS)) {
            throw new IllegalStateException("first acquisition timed out");
        }
        first.unlock();
        prepared(in);
        AtomicInteger tickets = new AtomicInteger();
        Object record = new Object();
        long[] last = {-1, 0}; // worker, release time (guarded by record)
        LongList handOffs = new LongList();
        LongList holds = new LongList();
        LongList waits = new LongList();
        AtomicInteger inside = new AtomicInteger();
        AtomicInteger maxInside = new AtomicInteger();
        long started = System.nanoTime();
        runThreads(workers, worker -> {
            RLock lock = lock(kind, key);
            while (tickets.getAndIncrement() < acquisitions) {
                long asked = System.nanoTime();
                if (!tryWait(lock, WAIT_MS)) {
                    throw new IllegalStateException("timed out after " + WAIT_MS + " ms");
                }
                long acquired = System.nanoTime();
                int now = inside.incrementAndGet();
                maxInside.accumulateAndGet(now, Math::max);
                synchronized (record) {
                    waits.add(acquired - asked);
                    if (last[0] >= 0 && last[0] != worker) {
                        handOffs.add(acquired - last[1]);
                    }
                }
                sleepMicros(holdUs);
                inside.decrementAndGet();
                long released = System.nanoTime();
                synchronized (record) {
                    holds.add(released - acquired);
                    last[0] = worker;
                    last[1] = released;
                }
                lock.unlock();
                sleepMicros(workUs);
            }
        });
        long elapsed = System.nanoTime() - started;
        data("hand_offs", handOffs.toArray());
        data("holds", holds.toArray());
        data("waits", waits.toArray());
        data("max_inside", maxInside.get());
        data("elapsed", elapsed);
    }

    /**
     * One process of W3h: {@code workers} threads draw tickets from the
     * Redis counter lock-bench's W10 uses, and each ticket is one
     * acquisition of the plain lock {@code key} (waiting up to 60 s), a hold,
     * a release and the work; all processes start when lock-bench sets the
     * start key.
     */
    private void w3hChild(int process, int workers, long total, long holdUs, long workUs, String key)
            throws Exception {
        say("ready");
        while (!redisson.getBucket(GO, StringCodec.INSTANCE).isExists()) {
            Thread.sleep(1);
        }
        List<long[]> mine = new ArrayList<>();
        runThreads(workers, t -> {
            RLock lock = redisson.getLock(key);
            while (redisson.getAtomicLong(TICKETS).incrementAndGet() <= total) {
                long asked = System.nanoTime();
                if (!tryWait(lock, 60_000)) {
                    throw new IllegalStateException("timed out after 60 s");
                }
                long waited = (System.nanoTime() - asked) / 1000;
                long acquired = nowMicros();
                sleepMicros(holdUs);
                long released = nowMicros();
                lock.unlock();
                synchronized (mine) {
                    mine.add(new long[] {0, waited, acquired, released});
                }
                sleepMicros(workUs);
            }
        });
        StringBuilder json = new StringBuilder("{\"process\":").append(process).append(",\"acquisitions\":[");
        for (int i = 0; i < mine.size(); i++) {
            long[] a = mine.get(i);
            json.append(i == 0 ? "[" : ",[")
                    .append(a[0]).append(',').append(a[1]).append(',')
                    .append(a[2]).append(',').append(a[3]).append(']');
        }
        say(json.append("]}").toString());
    }

    // ---- helpers ----

    @FunctionalInterface
    private interface Body {
        void run(int thread) throws Exception;
    }

    /** Runs {@code body} on {@code n} threads started together; rethrows the first failure. */
    private static void runThreads(int n, Body body) throws Exception {
        CountDownLatch start = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        Exception[] failure = new Exception[1];
        for (int i = 0; i < n; i++) {
            int index = i;
            Thread thread = new Thread(() -> {
                try {
                    start.await();
                    body.run(index);
                } catch (Exception e) {
                    synchronized (failure) {
                        if (failure[0] == null) {
                            failure[0] = e;
                        }
                    }
                }
            }, "bench-" + i);
            thread.start();
            threads.add(thread);
        }
        start.countDown();
        for (Thread thread : threads) {
            thread.join();
        }
        if (failure[0] != null) {
            throw failure[0];
        }
    }

    /** Sleeps {@code us} microseconds (Thread.sleep, as a user would). */
    private static void sleepMicros(long us) throws InterruptedException {
        if (us > 0) {
            Thread.sleep(us / 1000, (int) (us % 1000) * 1000);
        }
    }

    private static long nowMicros() {
        return ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now());
    }

    /** CPU time (user + system) of this process, all threads. */
    private static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    private static void say(String line) {
        OUT.println(line);
        OUT.flush();
    }

    private static void data(String name, long... values) {
        StringBuilder line = new StringBuilder(name);
        for (long v : values) {
            line.append(' ').append(v);
        }
        say(line.toString());
    }

    /** A growable list of longs. */
    private static final class LongList {
        private long[] items = new long[4096];
        private int size;

        void add(long v) {
            if (size == items.length) {
                items = java.util.Arrays.copyOf(items, size * 2);
            }
            items[size++] = v;
        }

        long[] toArray() {
            return java.util.Arrays.copyOf(items, size);
        }
    }
}
