// A Sarama client scenario for Millrace's old-client tests (tests/broker/test_sarama.py):
// create a topic, produce, list topics, consume in a group with commits, read the
// committed offsets back. Each step prints one JSON line; the exit status is 0 even when
// a step fails, so the test sees which steps did. Built offline against Debian's
// golang-github-shopify-sarama-dev (GOPATH mode).
//
// Below Kafka 0.10.2 Sarama has neither an admin client nor consumer groups, so there
// (its default version, 0.8.2, included) the scenario runs as such applications were
// written: the topic is made beforehand, topics are listed from Metadata, and partition
// consumers read every partition from the oldest offset while an offset manager commits
// what was read under the group's name (OffsetCommit v1 with no member, as Kafka's
// standalone commits).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

func emit(step string, value interface{}, err error) bool {
	line := map[string]interface{}{"step": step, "ok": err == nil}
	if value != nil {
		line["value"] = value
	}
	if err != nil {
		line["error"] = err.Error()
	}
	out, _ := json.Marshal(line)
	fmt.Println(string(out))
	return err == nil
}

type handler struct {
	mu     sync.Mutex
	seen   map[string]bool
	want   int
	done   chan struct{}
	closed bool
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		s.MarkMessage(msg, "")
		h.mu.Lock()
		h.seen[string(msg.Value)] = true
		if len(h.seen) >= h.want && !h.closed {
			h.closed = true
			close(h.done)
		}
		h.mu.Unlock()
	}
	return nil
}

func main() {
	broker := flag.String("broker", "", "host:port")
	user := flag.String("user", "", "SASL/PLAIN user (an API key id)")
	password := flag.String("password", "", "SASL/PLAIN password (its secret)")
	version := flag.String("version", "max", "max, default, or a Kafka version (2.1.0)")
	topic := flag.String("topic", "", "topic to create and use")
	group := flag.String("group", "", "consumer group")
	count := flag.Int("count", 30, "records to produce and consume")
	bench := flag.Bool("bench", false, "only read count records of partition 0 and time it")
	flag.Parse()

	config := sarama.NewConfig()
	switch *version {
	case "max":
		config.Version = sarama.MaxVersion
	case "default":
	default:
		parsed, err := sarama.ParseKafkaVersion(*version)
		if !emit("version", *version, err) {
			return
		}
		config.Version = parsed
	}
	config.ClientID = "sarama-test"
	config.Net.SASL.Enable = *user != "" // none: a development listener
	config.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	config.Net.SASL.User = *user
	config.Net.SASL.Password = *password
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Offsets.CommitInterval = 200 * time.Millisecond
	addrs := []string{*broker}
	if *bench {
		read(addrs, config, *topic, *count)
		os.Exit(0)
	}
	if !config.Version.IsAtLeast(sarama.V0_10_2_0) {
		simple(addrs, config, *topic, *group, *count)
		os.Exit(0)
	}

	admin, err := sarama.NewClusterAdmin(addrs, config)
	if !emit("connect", config.Version.String(), err) {
		return
	}
	defer admin.Close()
	detail := &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}
	emit("create_topic", nil, admin.CreateTopic(*topic, detail, false))

	produce(addrs, config, *topic, *count)

	topics, err := admin.ListTopics()
	_, listed := topics[*topic]
	emit("list_topics", listed, err)

	consumer, err := sarama.NewConsumerGroup(addrs, *group, config)
	if emit("group", nil, err) {
		h := &handler{seen: map[string]bool{}, want: *count, done: make(chan struct{})}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		go func() {
			for ctx.Err() == nil {
				if err := consumer.Consume(ctx, []string{*topic}, h); err != nil {
					emit("consume_error", nil, err)
					time.Sleep(500 * time.Millisecond)
				}
			}
		}()
		select {
		case <-h.done:
		case <-ctx.Done():
		}
		time.Sleep(time.Second) // one more commit interval
		cancel()
		h.mu.Lock()
		emit("consume", len(h.seen), nil)
		h.mu.Unlock()
		emit("group_close", nil, consumer.Close())
	}

	offsets, err := admin.ListConsumerGroupOffsets(*group, map[string][]int32{*topic: {0, 1, 2}})
	total := int64(0)
	if err == nil {
		for _, p := range offsets.Blocks[*topic] {
			if p.Err != sarama.ErrNoError {
				err = p.Err
			} else if p.Offset > 0 {
				total += p.Offset
			}
		}
	}
	emit("committed", total, err)
	os.Exit(0)
}

// produce sends count records keyed and valued "0", "1", ... one at a time, waiting for
// each acknowledgement.
func produce(addrs []string, config *sarama.Config, topic string, count int) {
	producer, err := sarama.NewSyncProducer(addrs, config)
	if !emit("producer", nil, err) {
		return
	}
	sent := 0
	for i := 0; i < count; i++ {
		msg := &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprint(i)),
			Value: sarama.StringEncoder(fmt.Sprint(i)),
		}
		if _, _, err = producer.SendMessage(msg); err != nil {
			break
		}
		sent++
	}
	emit("produce", sent, err)
	producer.Close()
}

// simple is the scenario for versions without consumer groups: Metadata lists the
// topics, partition consumers read from the oldest offset (ListOffsets and Fetch at
// Sarama's versions for config.Version), an offset manager commits what was read, and a
// second offset manager reads the commits back.
func simple(addrs []string, config *sarama.Config, topic, group string, count int) {
	client, err := sarama.NewClient(addrs, config)
	if !emit("connect", config.Version.String(), err) {
		return
	}
	defer client.Close()
	topics, err := client.Topics()
	listed := false
	for _, name := range topics {
		listed = listed || name == topic
	}
	emit("list_topics", listed, err)

	produce(addrs, config, topic, count)

	partitions, err := client.Partitions(topic)
	if !emit("partitions", len(partitions), err) {
		return
	}
	manager, err := sarama.NewOffsetManagerFromClient(group, client)
	if !emit("offset_manager", nil, err) {
		return
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if !emit("consumer", nil, err) {
		return
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range partitions {
		pom, err := manager.ManagePartition(topic, p)
		if !emit("manage_partition", p, err) {
			return
		}
		next, _ := pom.NextOffset() // OffsetFetch v1: none committed yet, so Initial
		pc, err := consumer.ConsumePartition(topic, p, next)
		if !emit("consume_partition", p, err) {
			pom.Close()
			return
		}
		wg.Add(1)
		go func(pc sarama.PartitionConsumer, pom sarama.PartitionOffsetManager) {
			defer wg.Done()
			defer pom.Close()
			defer pc.Close()
			for time.Now().Before(deadline) {
				select {
				case msg := <-pc.Messages():
					pom.MarkOffset(msg.Offset+1, "")
					mu.Lock()
					seen[string(msg.Value)] = true
					done := len(seen) >= count
					mu.Unlock()
					if done {
						return
					}
				case err := <-pc.Errors():
					emit("consume_error", nil, err)
				case <-time.After(200 * time.Millisecond):
					mu.Lock()
					done := len(seen) >= count
					mu.Unlock()
					if done {
						return
					}
				}
			}
		}(pc, pom)
	}
	wg.Wait()
	emit("consume", len(seen), nil)
	emit("consumer_close", nil, consumer.Close())
	emit("offset_manager_close", nil, manager.Close()) // flushes the last commits

	reader, err := sarama.NewOffsetManagerFromClient(group, client)
	if !emit("offset_reader", nil, err) {
		return
	}
	defer reader.Close()
	total := int64(0)
	for _, p := range partitions {
		pom, err := reader.ManagePartition(topic, p)
		if err == nil {
			next, _ := pom.NextOffset()
			if next > 0 {
				total += next
			}
			pom.Close()
		}
		if err != nil {
			emit("committed", nil, err)
			return
		}
	}
	emit("committed", total, nil)
}

// read times a partition consumer reading count records of partition 0 from its oldest
// offset (what `make bench-broker` compares across Fetch versions): one JSON line with
// the records read and the rate.
func read(addrs []string, config *sarama.Config, topic string, count int) {
	config.Consumer.Fetch.Default = 1 << 20
	consumer, err := sarama.NewConsumer(addrs, config)
	if !emit("consumer", config.Version.String(), err) {
		return
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if !emit("consume_partition", 0, err) {
		return
	}
	defer pc.Close()
	started := time.Now()
	got := 0
	deadline := time.After(20 * time.Minute)
	for got < count {
		select {
		case <-pc.Messages():
			got++
		case err := <-pc.Errors():
			emit("consume_error", nil, err)
			return
		case <-deadline:
			emit("read", got, fmt.Errorf("timed out"))
			return
		}
	}
	seconds := time.Since(started).Seconds()
	emit("read", map[string]interface{}{
		"records":       got,
		"seconds":       seconds,
		"records_per_s": int(float64(got) / seconds),
	}, nil)
}
