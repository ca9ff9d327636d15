// A steady request load for the capture-cost bench: <producers> producers (each its own
// connection, acks=1, linger.ms=0, one request in flight), each writing to its own partition at
// <rate>/<producers> records/s, so each record is its own Produce request while the broker keeps
// up; and a consumer assigned to every partition whose fetches are answered as data arrives
// (fetch.min.bytes=1), so Fetch requests follow the produce rate. No group coordination.
// Prints counts when done.
//
//   java -cp <kafka-clients classpath>:<classes> RequestLoad <bootstrap> <topic> <seconds> <rate> <producers>

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class RequestLoad {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        double seconds = Double.parseDouble(args[2]);
        int rate = Integer.parseInt(args[3]);
        int producers = Integer.parseInt(args[4]);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong consumed = new AtomicLong();

        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("key.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("value.deserializer", ByteArrayDeserializer.class.getName());
        cp.put("enable.auto.commit", "false");
        cp.put("fetch.min.bytes", "1");
        cp.put("fetch.max.wait.ms", "500");
        Thread consumer = new Thread(() -> {
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(cp)) {
                List<TopicPartition> tps = new ArrayList<>();
                for (int i = 0; i < producers; i++) tps.add(new TopicPartition(topic, i));
                c.assign(tps);
                c.seekToEnd(tps);
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(200));
                    consumed.addAndGet(records.count());
                }
            }
        });
        consumer.start();

        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        pp.put("acks", "1");
        pp.put("linger.ms", "0");
        pp.put("max.in.flight.requests.per.connection", "1");
        pp.put("enable.idempotence", "false");
        byte[] value = new byte[200];
        AtomicLong sent = new AtomicLong();
        AtomicLong acked = new AtomicLong();
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        long interval = 1_000_000_000L * producers / rate;
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < producers; i++) {
            final int partition = i;
            Thread t = new Thread(() -> {
                try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(pp)) {
                    long due = start + interval * partition / producers;
                    while (due < end) {
                        long now = System.nanoTime();
                        if (now < due) {
                            LockSupport.parkNanos(due - now);
                            continue;
                        }
                        if (now - due > 1_000_000_000L) due = now; // fell behind: no catch-up burst
                        p.send(new ProducerRecord<>(topic, partition, null, value), (m, e) -> {
                            if (e == null && acked.incrementAndGet() == 1) {
                                System.out.println("ready");
                                System.out.flush();
                            }
                        });
                        sent.incrementAndGet();
                        due += interval;
                    }
                    p.flush();
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
        stop.set(true);
        consumer.join(5000);
        System.out.println("sent " + sent.get() + " acked " + acked.get() + " consumed " + consumed.get());
    }
}
