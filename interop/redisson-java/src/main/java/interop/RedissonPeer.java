package interop;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBucket;
import org.redisson.api.RFencedLock;
import org.redisson.api.RList;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RReadWriteLock;
import org.redisson.api.RScript;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;

/**
 * The Java half of the Redisson interop tests (tests/redisson_java.rs), with
 * real Redisson's {@link RFencedLock}. One mode per run:
 *
 * <ul>
 *   <li>{@code turns NAME N SIDE [THREADS] [alternate]}: each of THREADS
 *       threads (default 1) takes lock NAME N times and, in each turn, does
 *       what the Rust side does in its turns, on the same keys: mark the turn
 *       inside (an overlap is counted when someone else is), increment a
 *       counter by a read and a later write, append {@code <side> <token>} to
 *       the token list in lock order, and record the hand-off time from the
 *       other side's release. With {@code alternate}, a turn begins only
 *       after the other side has had one (the last token is not ours) and is
 *       held 20 ms, so that every hand-off is a wake-up of a waiting side;
 *       without it, each thread pauses 0 to 8 ms between turns.
 *   <li>{@code hold NAME MS}: take the lock, print {@code held <token>}, hold
 *       it MS ms, unlock, and print {@code unlocked} or, when Redisson refuses
 *       the unlock (the lock was force-released meanwhile),
 *       {@code unlock refused}.
 *   <li>{@code force NAME}: {@code forceUnlock()}; prints {@code forced <result>}.
 *   <li>{@code hold-forever NAME}: take the lock, print {@code held <token>}
 *       and sleep (to be killed; the watchdog renews the lease until then).
 *   <li>{@code rw-turns NAME N SIDE THREADS ROLE [alternate]}: the same with
 *       Redisson's {@link RReadWriteLock}: each thread takes N turns as a
 *       reader or a writer (ROLE {@code read}, {@code write},
 *       {@code write-read} or {@code read-write}: the first half of the turns
 *       one, the second the other, or {@code mixed}: each thread's every
 *       third turn a write). With {@code alternate}, the hand-off times go to
 *       {@code handoffs:<side>:read} or {@code :write} by the turn's role. A reader
 *       counts itself in {@code readers} and {@code readers:<side>} and
 *       counts an overlap when a writer is in; it counts {@code shared} when
 *       a reader of the other side is in too. A writer counts an overlap
 *       when anyone else is in, and increments {@code counter} by a read
 *       and a later write.
 *   <li>{@code sem-turns NAME N SIDE THREADS PERMITS [alternate]}: the same
 *       with Redisson's {@link RPermitExpirableSemaphore} of PERMITS permits
 *       ({@code trySetPermits}): each turn takes one permit with a 30 s lease;
 *       a holder counts itself in {@code holders} and
 *       {@code holders:<side>}, counts an overlap when more than PERMITS
 *       are in, and counts {@code shared} when a holder of the other side is
 *       in too.
 *   <li>{@code rw-hold NAME read|write MS}: take that side of the
 *       read-write lock, print {@code held}, hold it MS ms, unlock, print
 *       {@code unlocked}.
 *   <li>{@code rw-try NAME read|write}: {@code tryLock()} once; prints
 *       {@code acquired} (and unlocks) or {@code busy}.
 * </ul>
 *
 * <p>{@code NAME N [SIDE]} without a mode is {@code turns NAME N SIDE}. Every
 * mode prints {@code ready} once connected.
 *
 * <p>Environment: {@code REDIS_URL} (one node) or {@code REDIS_CLUSTER} (seed
 * URLs, comma separated) and, for a cluster, {@code SHARDED_SUBSCRIPTION_MODE}
 * (AUTO, ON or OFF; Redisson's default is AUTO); {@code REDISSON_WATCHDOG_MS},
 * Redisson's {@code lockWatchdogTimeout} (its default is 30000).
 */
public final class RedissonPeer {
    private RedissonPeer() {}

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "turns";
        if (!List.of("turns", "hold", "force", "hold-forever", "rw-turns", "rw-hold", "rw-try",
                "sem-turns")
                .contains(mode)) {
            String[] turns = new String[args.length + 1];
            turns[0] = "turns";
            System.arraycopy(args, 0, turns, 1, args.length);
            args = turns;
            mode = "turns";
        }
        String name = args.length > 1 ? args[1] : "interop:java";
        RedissonClient redisson = Redisson.create(config(System.getenv()));
        say("ready");
        try {
            RFencedLock lock = redisson.getFencedLock(name);
            RReadWriteLock rw = redisson.getReadWriteLock(name);
            switch (mode) {
                case "sem-turns" -> {
                    int turns = Integer.parseInt(args[2]);
                    String side = args[3];
                    int threads = Integer.parseInt(args[4]);
                    int permits = Integer.parseInt(args[5]);
                    boolean alternate = args.length > 6 && args[6].equals("alternate");
                    semTurns(redisson, name, turns, side, threads, permits, alternate);
                    say(side + ": " + threads * turns + " semaphore turns on " + name);
                }
                case "rw-turns" -> {
                    int turns = Integer.parseInt(args[2]);
                    String side = args[3];
                    int threads = Integer.parseInt(args[4]);
                    String role = args[5];
                    boolean alternate = args.length > 6 && args[6].equals("alternate");
                    rwTurns(redisson, rw, name, turns, side, threads, role, alternate);
                    say(side + ": " + threads * turns + " read-write turns on " + name);
                }
                case "rw-hold" -> {
                    RLock side = args[2].equals("read") ? rw.readLock() : rw.writeLock();
                    long ms = Long.parseLong(args[3]);
                    side.lock();
                    say("held");
                    Thread.sleep(ms);
                    side.unlock();
                    say("unlocked");
                }
                case "rw-try" -> {
                    RLock side = args[2].equals("read") ? rw.readLock() : rw.writeLock();
                    if (side.tryLock()) {
                        side.unlock();
                        say("acquired");
                    } else {
                        say("busy");
                    }
                }
                case "turns" -> {
                    int turns = args.length > 2 ? Integer.parseInt(args[2]) : 200;
                    String side = args.length > 3 ? args[3] : "java";
                    int threads = args.length > 4 ? Integer.parseInt(args[4]) : 1;
                    boolean alternate = args.length > 5 && args[5].equals("alternate");
                    turns(redisson, lock, name, turns, side, threads, alternate);
                    say(side + ": " + threads * turns + " turns on " + name);
                }
                case "hold" -> {
                    long ms = Long.parseLong(args[2]);
                    say("held " + lock.lockAndGetToken());
                    Thread.sleep(ms);
                    try {
                        lock.unlock();
                        say("unlocked");
                    } catch (IllegalMonitorStateException e) {
                        say("unlock refused (" + e.getMessage() + ")");
                    }
                }
                case "force" -> say("forced " + lock.forceUnlock());
                default -> { // hold-forever
                    say("held " + lock.lockAndGetToken());
                    Thread.sleep(Long.MAX_VALUE);
                }
            }
        } finally {
            redisson.shutdown(0, 2, java.util.concurrent.TimeUnit.SECONDS);
        }
    }

    private static Config config(Map<String, String> env) throws ReflectiveOperationException {
        Config config = new Config();
        String watchdog = env.get("REDISSON_WATCHDOG_MS");
        if (watchdog != null && !watchdog.isEmpty()) {
            config.setLockWatchdogTimeout(Long.parseLong(watchdog));
        }
        String cluster = env.get("REDIS_CLUSTER");
        if (cluster != null && !cluster.isEmpty()) {
            ClusterServersConfig servers = config.useClusterServers()
                    .addNodeAddress(trim(cluster).split(","));
            shardedSubscriptionMode(servers, env.getOrDefault("SHARDED_SUBSCRIPTION_MODE", "AUTO"));
        } else {
            config.useSingleServer().setAddress(trim(env.getOrDefault("REDIS_URL", "redis://127.0.0.1:6379")));
        }
        return config;
    }

    /**
     * {@code setShardedSubscriptionMode(mode)}, by reflection: Redisson has the
     * setting since 3.2x, not in every version of the range the layout follows
     * (3.24.3 lacks it). Without it only AUTO (its default) can be asked for.
     */
    @SuppressWarnings({"unchecked", "rawtypes"})
    private static void shardedSubscriptionMode(ClusterServersConfig servers, String mode)
            throws ReflectiveOperationException {
        Class<? extends Enum> type;
        try {
            type = (Class<? extends Enum>) Class.forName("org.redisson.config.ShardedSubscriptionMode");
        } catch (ClassNotFoundException e) {
            if (mode.equals("AUTO")) {
                return;
            }
            System.err.println("this Redisson version has no shardedSubscriptionMode: cannot set " + mode);
            System.exit(2);
            return;
        }
        servers.getClass().getMethod("setShardedSubscriptionMode", type)
                .invoke(servers, Enum.valueOf(type, mode));
    }

    private static void turns(RedissonClient redisson, RFencedLock lock, String name, int turns,
            String side, int threads, boolean alternate) throws Exception {
        String prefix = "interop:" + name + ":";
        RBucket<String> inside = redisson.getBucket(prefix + "inside", StringCodec.INSTANCE);
        RAtomicLong overlaps = redisson.getAtomicLong(prefix + "overlaps");
        RBucket<String> counter = redisson.getBucket(prefix + "counter", StringCodec.INSTANCE);
        RList<String> tokens = redisson.getList(prefix + "tokens", StringCodec.INSTANCE);
        RBucket<String> released = redisson.getBucket(prefix + "released", StringCodec.INSTANCE);
        RList<String> handoffs = redisson.getList(prefix + "handoffs:" + side, StringCodec.INSTANCE);
        RScript script = redisson.getScript(StringCodec.INSTANCE);
        List<Thread> running = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread thread = new Thread(() -> {
                String who = side + ":" + Thread.currentThread().getId();
                try {
                    for (int i = 0; i < turns; i++) {
                        while (alternate && isLast(tokens, side)) {
                            Thread.sleep(2);
                        }
                        // Waits (woken by the release message, the Rust
                        // side's included) and returns the next token of
                        // redisson_lock_token:{NAME}.
                        Long token = lock.lockAndGetToken();
                        try {
                            long now = micros(script);
                            String previous = released.get();
                            if (previous != null) {
                                String[] parts = previous.split(" ");
                                if (!parts[0].equals(side)) {
                                    handoffs.add(Long.toString(now - Long.parseLong(parts[1])));
                                }
                            }
                            boolean entered = inside.setIfAbsent(who);
                            if (!entered) {
                                overlaps.incrementAndGet();
                            }
                            String value = counter.get();
                            long current = value == null ? 0 : Long.parseLong(value);
                            Thread.sleep(1);
                            counter.set(Long.toString(current + 1));
                            tokens.add(side + " " + token);
                            if (alternate) {
                                Thread.sleep(20);
                            }
                            if (entered) {
                                inside.delete();
                            }
                            released.set(side + " " + micros(script));
                        } finally {
                            lock.unlock();
                        }
                        if (!alternate) {
                            // A pause of 0 to 8 ms between turns (as the
                            // Rust side's), so that the other side's
                            // waiters get the lock too, not mostly this
                            // side's other thread.
                            Thread.sleep(java.util.concurrent.ThreadLocalRandom.current().nextInt(9));
                        }
                    }
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            });
            thread.start();
            running.add(thread);
        }
        for (Thread thread : running) {
            thread.join();
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("a turn failed", failures.get(0));
        }
    }

    private static void rwTurns(RedissonClient redisson, RReadWriteLock rw, String name, int turns,
            String side, int threads, String role, boolean alternate) throws Exception {
        String prefix = "interop:" + name + ":";
        String other = side.equals("java") ? "rust" : "java";
        RAtomicLong readers = redisson.getAtomicLong(prefix + "readers");
        RAtomicLong mine = redisson.getAtomicLong(prefix + "readers:" + side);
        RAtomicLong theirs = redisson.getAtomicLong(prefix + "readers:" + other);
        RAtomicLong writers = redisson.getAtomicLong(prefix + "writers");
        RAtomicLong overlaps = redisson.getAtomicLong(prefix + "overlaps");
        RAtomicLong shared = redisson.getAtomicLong(prefix + "shared");
        RBucket<String> counter = redisson.getBucket(prefix + "counter", StringCodec.INSTANCE);
        RList<String> tokens = redisson.getList(prefix + "tokens", StringCodec.INSTANCE);
        RBucket<String> released = redisson.getBucket(prefix + "released", StringCodec.INSTANCE);
        RList<String> readHandoffs = redisson.getList(prefix + "handoffs:" + side + ":read", StringCodec.INSTANCE);
        RList<String> writeHandoffs = redisson.getList(prefix + "handoffs:" + side + ":write", StringCodec.INSTANCE);
        RScript script = redisson.getScript(StringCodec.INSTANCE);
        List<Thread> running = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread thread = new Thread(() -> {
                try {
                    for (int i = 0; i < turns; i++) {
                        boolean write = role.equals("write")
                                || (role.equals("mixed") && i % 3 == 2)
                                || (role.equals("write-read") && i < turns / 2)
                                || (role.equals("read-write") && i >= turns / 2);
                        RList<String> handoffs = write ? writeHandoffs : readHandoffs;
                        while (alternate && isLast(tokens, side)) {
                            Thread.sleep(2);
                        }
                        RLock lock = write ? rw.writeLock() : rw.readLock();
                        lock.lock();
                        try {
                            long now = micros(script);
                            String previous = released.get();
                            if (alternate && previous != null) {
                                String[] parts = previous.split(" ");
                                if (!parts[0].equals(side)) {
                                    handoffs.add(Long.toString(now - Long.parseLong(parts[1])));
                                }
                            }
                            if (write) {
                                long in = writers.incrementAndGet();
                                if (in != 1 || readers.get() != 0) {
                                    overlaps.incrementAndGet();
                                }
                                String value = counter.get();
                                long current = value == null ? 0 : Long.parseLong(value);
                                Thread.sleep(1);
                                counter.set(Long.toString(current + 1));
                                tokens.add(side + " write");
                                Thread.sleep(alternate ? 20 : 1);
                                writers.decrementAndGet();
                            } else {
                                mine.incrementAndGet();
                                readers.incrementAndGet();
                                if (writers.get() != 0) {
                                    overlaps.incrementAndGet();
                                }
                                if (theirs.get() > 0) {
                                    shared.incrementAndGet();
                                }
                                tokens.add(side + " read");
                                Thread.sleep(alternate ? 20 : 8);
                                readers.decrementAndGet();
                                mine.decrementAndGet();
                            }
                            released.set(side + " " + micros(script));
                        } finally {
                            lock.unlock();
                        }
                        if (!alternate) {
                            Thread.sleep(java.util.concurrent.ThreadLocalRandom.current().nextInt(5));
                        }
                    }
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            });
            thread.start();
            running.add(thread);
        }
        for (Thread thread : running) {
            thread.join();
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("a read-write turn failed", failures.get(0));
        }
    }

    private static void semTurns(RedissonClient redisson, String name, int turns, String side,
            int threads, int permits, boolean alternate) throws Exception {
        String prefix = "interop:" + name + ":";
        String other = side.equals("java") ? "rust" : "java";
        RPermitExpirableSemaphore semaphore = redisson.getPermitExpirableSemaphore(name);
        semaphore.trySetPermits(permits);
        RAtomicLong holders = redisson.getAtomicLong(prefix + "holders");
        RAtomicLong mine = redisson.getAtomicLong(prefix + "holders:" + side);
        RAtomicLong theirs = redisson.getAtomicLong(prefix + "holders:" + other);
        RAtomicLong overlaps = redisson.getAtomicLong(prefix + "overlaps");
        RAtomicLong shared = redisson.getAtomicLong(prefix + "shared");
        RList<String> tokens = redisson.getList(prefix + "tokens", StringCodec.INSTANCE);
        RBucket<String> released = redisson.getBucket(prefix + "released", StringCodec.INSTANCE);
        RList<String> handoffs = redisson.getList(prefix + "handoffs:" + side, StringCodec.INSTANCE);
        RScript script = redisson.getScript(StringCodec.INSTANCE);
        List<Thread> running = new ArrayList<>();
        List<Throwable> failures = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            Thread thread = new Thread(() -> {
                try {
                    for (int i = 0; i < turns; i++) {
                        while (alternate && isLast(tokens, side)) {
                            Thread.sleep(2);
                        }
                        // Waits, woken by the count published on
                        // redisson_sc:{NAME} (the Rust side's releases too).
                        String id = semaphore.acquire(30, java.util.concurrent.TimeUnit.SECONDS);
                        try {
                            long now = micros(script);
                            String previous = released.get();
                            if (alternate && previous != null) {
                                String[] parts = previous.split(" ");
                                if (!parts[0].equals(side)) {
                                    handoffs.add(Long.toString(now - Long.parseLong(parts[1])));
                                }
                            }
                            mine.incrementAndGet();
                            if (holders.incrementAndGet() > permits) {
                                overlaps.incrementAndGet();
                            }
                            if (theirs.get() > 0) {
                                shared.incrementAndGet();
                            }
                            tokens.add(side + " permit");
                            Thread.sleep(alternate ? 20 : 8);
                            holders.decrementAndGet();
                            mine.decrementAndGet();
                            released.set(side + " " + micros(script));
                        } finally {
                            semaphore.release(id);
                        }
                        if (!alternate) {
                            Thread.sleep(java.util.concurrent.ThreadLocalRandom.current().nextInt(5));
                        }
                    }
                } catch (Throwable e) {
                    synchronized (failures) {
                        failures.add(e);
                    }
                }
            });
            thread.start();
            running.add(thread);
        }
        for (Thread thread : running) {
            thread.join();
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("a semaphore turn failed", failures.get(0));
        }
    }

    /** Whether the last turn taken was this side's. */
    private static boolean isLast(RList<String> tokens, String side) {
        List<String> last = tokens.range(-1, -1);
        return !last.isEmpty() && last.get(0).startsWith(side + " ");
    }

    private static void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** Redisson wants {@code redis://host:port} without a trailing slash. */
    private static String trim(String urls) {
        return urls.replaceAll("/(?=,|$)", "");
    }

    /** The server's clock in microseconds (one clock for both sides). */
    private static long micros(RScript script) {
        String time = script.eval(RScript.Mode.READ_ONLY,
                "local t = redis.call('time') return t[1] .. ' ' .. t[2]",
                RScript.ReturnType.VALUE);
        String[] parts = time.split(" ");
        return Long.parseLong(parts[0]) * 1_000_000L + Long.parseLong(parts[1]);
    }
}
