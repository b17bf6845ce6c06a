package interop;

import java.util.Map;

import org.redisson.Redisson;
import org.redisson.api.RAtomicLong;
import org.redisson.api.RBucket;
import org.redisson.api.RFencedLock;
import org.redisson.api.RList;
import org.redisson.api.RScript;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;
import org.redisson.config.ShardedSubscriptionMode;

/**
 * The Java half of the Redisson interop scenario: takes Redisson's
 * {@link RFencedLock} {@code NAME} {@code TURNS} times and, in each turn, does
 * what the Rust half (examples/redisson_peer.rs) does in its turns, on the
 * same keys: mark the turn inside (an overlap is counted when the other side
 * is inside), increment a counter by a read and a later write, append
 * {@code <side> <token>} to the token list in lock order, and record the
 * hand-off time from the other side's release.
 *
 * <p>Usage: {@code mvn -q compile exec:java -Dexec.args="NAME TURNS [SIDE]"} with
 * {@code REDIS_URL} (one node) or {@code REDIS_CLUSTER} (seed URLs, comma
 * separated) and, for a cluster, {@code SHARDED_SUBSCRIPTION_MODE}
 * (AUTO, ON or OFF; Redisson's default is AUTO).
 */
public final class RedissonPeer {
    private RedissonPeer() {}

    public static void main(String[] args) throws Exception {
        String name = args.length > 0 ? args[0] : "interop:java";
        int turns = args.length > 1 ? Integer.parseInt(args[1]) : 200;
        String side = args.length > 2 ? args[2] : "java";
        Map<String, String> env = System.getenv();

        Config config = new Config();
        String cluster = env.get("REDIS_CLUSTER");
        if (cluster != null && !cluster.isEmpty()) {
            config.useClusterServers()
                    .addNodeAddress(trim(cluster).split(","))
                    .setShardedSubscriptionMode(ShardedSubscriptionMode.valueOf(
                            env.getOrDefault("SHARDED_SUBSCRIPTION_MODE", "AUTO")));
        } else {
            config.useSingleServer().setAddress(trim(env.getOrDefault("REDIS_URL", "redis://127.0.0.1:6379")));
        }
        RedissonClient redisson = Redisson.create(config);
        try {
            String prefix = "interop:" + name + ":";
            RFencedLock lock = redisson.getFencedLock(name);
            RBucket<String> inside = redisson.getBucket(prefix + "inside", StringCodec.INSTANCE);
            RAtomicLong overlaps = redisson.getAtomicLong(prefix + "overlaps");
            RBucket<String> counter = redisson.getBucket(prefix + "counter", StringCodec.INSTANCE);
            RList<String> tokens = redisson.getList(prefix + "tokens", StringCodec.INSTANCE);
            RBucket<String> released = redisson.getBucket(prefix + "released", StringCodec.INSTANCE);
            RList<String> handoffs = redisson.getList(prefix + "handoffs", StringCodec.INSTANCE);
            RScript script = redisson.getScript(StringCodec.INSTANCE);
            String who = side + ":" + Thread.currentThread().getId();
            for (int i = 0; i < turns; i++) {
                // Waits (woken by the release message, Rust's included) and
                // returns the next token of redisson_lock_token:{NAME}.
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
                    if (entered) {
                        inside.delete();
                    }
                    released.set(side + " " + micros(script));
                } finally {
                    lock.unlock();
                }
            }
            System.out.println(side + ": " + turns + " turns on " + name);
        } finally {
            redisson.shutdown();
        }
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
