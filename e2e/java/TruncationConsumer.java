// A Kafka Java consumer that reads one partition from offset 0 and prints, one JSON object a
// line, every record it returns (offset, leader epoch, value) and a LogTruncationException if
// poll() throws one: the witness of KIP-320 for e2e/test_kip320_truncation.py. Run by Java's
// source launcher (java -cp <kafka libs>/* TruncationConsumer.java ...), so no build step.
//
// Arguments: bootstrap topic auto.offset.reset seconds [group]. Without a group it reads from
// offset 0; with one it starts from the group's committed offset (and its leader epoch) and
// commits (commitSync: the position and the epoch of the last record) before printing a record.
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.LogTruncationException;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class TruncationConsumer {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("auto.offset.reset", args[2]);
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        // a dead leader is noticed by its closed connection; reconnect quickly at test scale
        props.put("reconnect.backoff.max.ms", "500");
        props.put("retry.backoff.max.ms", "500");
        // a frozen broker (SIGSTOP) may be a group's coordinator: give up on it in 5 s, not 30
        props.put("request.timeout.ms", "5000");
        boolean grouped = args.length > 4;
        if (grouped) {
            props.put("group.id", args[4]);
        }
        TopicPartition tp = new TopicPartition(args[1], 0);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[3]) * 1000;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(List.of(tp));
            if (!grouped) {
                consumer.seek(tp, 0);
            }
            System.out.println("{\"event\": \"started\"}");
            while (System.currentTimeMillis() < deadline) {
                try {
                    var records = consumer.poll(Duration.ofMillis(200));
                    if (grouped && !records.isEmpty()) {
                        consumer.commitSync();
                    }
                    for (ConsumerRecord<String, String> r : records) {
                        System.out.println("{\"event\": \"record\", \"offset\": " + r.offset()
                                + ", \"epoch\": " + r.leaderEpoch().orElse(-1)
                                + ", \"value\": \"" + r.value() + "\"}");
                    }
                } catch (LogTruncationException e) {
                    OffsetAndMetadata divergent = e.divergentOffsets().get(tp);
                    System.out.println("{\"event\": \"truncation\", \"position\": "
                            + e.offsetOutOfRangePartitions().get(tp)
                            + ", \"divergent\": " + (divergent == null ? -1 : divergent.offset())
                            + ", \"epoch\": " + (divergent == null ? -1
                                    : divergent.leaderEpoch().orElse(-1))
                            + ", \"message\": \"" + e.getMessage().replace("\"", "'") + "\"}");
                    System.out.flush();
                    return;
                }
                System.out.flush();
            }
        }
    }
}
