package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
)

// Trying a setting for the Kafka acknowledgement's tail (docs/performance.md, "The Kafka
// acknowledgement's tail"). Two flags, both recorded in results.json and results.md so a
// run with them is never read as a stock run:
//
//   - -gateway-env KEY=VALUE,...: added to the gateways' environment in the gateway and
//     salecurve steps (client settings the gateway reads, e.g. SECKILL_KAFKA_BATCH_TIMEOUT).
//   - -kafka-config KEY=VALUE,...: broker settings Kafka can change on a running broker
//     (num.io.threads, num.network.threads, num.replica.fetchers, ...), set on every broker
//     for those two steps and deleted after each, so the broker is back on its
//     own settings for every other step. The broker validates them first, so a setting
//     it cannot change at run time (the JVM's, log.dirs) fails the run before anything
//     is measured; those need a broker restart (the doc says how).

// parseSettings reads "K=V,K2=V2" (spaces around items ignored); empty gives nil.
func parseSettings(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.TrimSpace(v) == "" {
			return nil, fmt.Errorf("%q is not KEY=VALUE", item)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s given twice", k)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// settingsNote is what the report says about the settings tried (nil for a stock run).
func settingsNote(gatewayEnv, kafkaConfig map[string]string) map[string]string {
	if len(gatewayEnv) == 0 && len(kafkaConfig) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range gatewayEnv {
		out["gateway env "+k] = v
	}
	for k, v := range kafkaConfig {
		out["broker config "+k] = v
	}
	return out
}

func sortedSettings(m map[string]string) []kafka.IncrementalAlterConfigsRequestConfig {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]kafka.IncrementalAlterConfigsRequestConfig, 0, len(keys))
	for _, k := range keys {
		out = append(out, kafka.IncrementalAlterConfigsRequestConfig{Name: k, Value: m[k]})
	}
	return out
}

// alterBrokerDefaults sets (or, with del, deletes) settings on every broker of the
// cluster, one broker at a time (kafka-go sends a broker's config to that broker and cannot
// address the cluster-wide default). validateOnly asks each broker to check them and
// change nothing.
func alterBrokerDefaults(ctx context.Context, brokers []string, settings map[string]string, del, validateOnly bool) error {
	if len(settings) == 0 {
		return nil
	}
	cfgs := sortedSettings(settings)
	if del {
		for i := range cfgs {
			cfgs[i].ConfigOperation, cfgs[i].Value = kafka.ConfigOperationDelete, ""
		}
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return fmt.Errorf("broker configs: list the brokers: %w", err)
	}
	if len(meta.Brokers) == 0 {
		return errors.New("broker configs: the cluster lists no brokers")
	}
	var errs []error
	for _, br := range meta.Brokers {
		resp, err := client.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{ValidateOnly: validateOnly,
			Resources: []kafka.IncrementalAlterConfigsRequestResource{{ResourceType: kafka.ResourceTypeBroker,
				ResourceName: strconv.Itoa(br.ID), Configs: cfgs}}})
		if err != nil {
			errs = append(errs, fmt.Errorf("broker %d: %w", br.ID, err))
			continue
		}
		for _, r := range resp.Resources {
			if r.Error != nil {
				errs = append(errs, fmt.Errorf("broker %d: %w", br.ID, r.Error))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("broker configs %v: %w", settings, err)
	}
	return nil
}

// applyKafkaConfig sets -kafka-config on the brokers for one step, after the broker
// validated every setting.
func (b *bench) applyKafkaConfig(ctx context.Context, c *harness.Pipeline) error {
	if len(b.kafkaConfig) == 0 {
		return nil
	}
	if err := alterBrokerDefaults(ctx, c.Brokers, b.kafkaConfig, false, true); err != nil {
		return fmt.Errorf("-kafka-config refused by the broker: %w", err)
	}
	b.logf("  broker configs set for this step: %v", b.kafkaConfig)
	return alterBrokerDefaults(ctx, c.Brokers, b.kafkaConfig, false, false)
}

// restoreKafkaConfig deletes -kafka-config again: the brokers are back on their own
// settings. A failure is logged loudly (the step's figures are already taken).
func (b *bench) restoreKafkaConfig(ctx context.Context, c *harness.Pipeline) {
	if len(b.kafkaConfig) == 0 {
		return
	}
	if err := alterBrokerDefaults(context.WithoutCancel(ctx), c.Brokers, b.kafkaConfig, true, false); err != nil {
		b.logf("  WARNING: could not remove the broker configs %v; remove them by hand (kafka-configs --entity-type brokers --entity-name <id> --alter --delete-config ...): %v",
			b.kafkaConfig, err)
	}
}
