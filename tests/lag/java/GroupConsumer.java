// A Java consumer in a group, for the lag tests: joins <group> with the given rebalance protocol
// (group.protocol=consumer is KIP-848, classic the older one), reads <topic> from the start and
// commits after every poll that returned records, printing "committed <partition> <offset>" for
// each partition it committed. A line "stop" on stdin (or stdin closing) makes it leave the group
// (close()) and print "closed".
//
//   java -cp <kafka lib>/*:<classes> GroupConsumer <bootstrap> <topic> <group> <consumer|classic>

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupConsumer {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("group.id", args[2]);
        p.put("group.protocol", args[3]);
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        AtomicBoolean stop = new AtomicBoolean();
        Thread stdin = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = r.readLine()) != null && !line.trim().equals("stop")) { }
            } catch (Exception e) { }
            stop.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            c.subscribe(List.of(args[1]));
            while (!stop.get()) {
                ConsumerRecords<byte[], byte[]> records = c.poll(Duration.ofMillis(100));
                if (records.isEmpty()) continue;
                c.commitSync();
                for (TopicPartition tp : records.partitions()) {
                    System.out.println("committed " + tp.partition() + " " + c.position(tp));
                }
                System.out.flush();
            }
        }
        System.out.println("closed");
        System.out.flush();
    }
}
