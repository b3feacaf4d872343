// A lag probe with sarama, the Go client KEDA's Kafka scaler and kafka_exporter are built on,
// doing what they do against a cluster: metadata, the group's committed offsets
// (OffsetFetch), the partitions' end offsets (ListOffsets), ListGroups and DescribeGroups.
// Usage: probe BOOTSTRAP GROUP TOPIC; prints one JSON object.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/IBM/sarama"
)

func fail(step string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", step, err)
	os.Exit(2)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: probe BOOTSTRAP GROUP TOPIC")
		os.Exit(1)
	}
	group, topic := os.Args[2], os.Args[3]
	config := sarama.NewConfig()
	config.Version = sarama.V2_8_0_0 // KEDA's default is 1.0.0; kafka_exporter's 2.0.0+
	client, err := sarama.NewClient(strings.Split(os.Args[1], ","), config)
	if err != nil {
		fail("client", err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		fail("admin", err)
	}
	partitions, err := client.Partitions(topic)
	if err != nil {
		fail("metadata", err)
	}
	committed, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err != nil {
		fail("offset fetch", err)
	}
	groups, err := admin.ListConsumerGroups()
	if err != nil {
		fail("list groups", err)
	}
	described, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		fail("describe groups", err)
	}
	type partition struct {
		End       int64 `json:"end"`
		Committed int64 `json:"committed"`
	}
	out := map[int32]partition{}
	for _, p := range partitions {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			fail("list offsets", err)
		}
		at := int64(-1)
		if block := committed.GetBlock(topic, p); block != nil {
			at = block.Offset
		}
		out[p] = partition{end, at}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"partitions": out, "groups": groups, "state": described[0].State,
		"protocol_type": described[0].ProtocolType,
	})
}
