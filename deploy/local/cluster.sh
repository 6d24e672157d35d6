# shellcheck shell=bash
# deploy/local/cluster.sh: the cluster profile of deploy/local/stack, which sources it
# (`deploy/local/stack up|down|status|env --profile cluster`). The same real servers as the
# single-node stack, in the shape a shop runs on its biggest sale day, on 127.0.0.1 only:
#
#   kafka-1..3   Apache Kafka 4.4.0, three KRaft nodes (broker+controller each, a three-voter
#                quorum); topics with replication factor 3 and min.insync.replicas 2
#   redis-1..6   Redis Cluster: three primaries and three replicas (redis-cli --cluster create
#                --cluster-replicas 1), AOF everysec and noeviction on each
#   mariadb      the single-node stack's MariaDB server, with a database of its own
#                (seckill_cluster)
#
# Each node has its own ports, folder and PID file under $STATE/cluster/<node>/. The services
# (two gateways behind HAProxy, three consumers, two reconcilers) are started by
# `PROFILE=cluster deploy/local/run` (make run PROFILE=cluster).
#
# Node helpers for fault scenarios (NODE is kafka-1..3 or redis-1..6):
#   deploy/local/stack kill NODE --profile cluster    SIGKILL, wait until gone
#   deploy/local/stack stop NODE --profile cluster    SIGTERM, wait until gone (30 s, then SIGKILL)
#   deploy/local/stack start NODE --profile cluster   start it again (same data), wait ready
# `up` starts every node that is down, so it also restarts a killed one.
#
# Every broker runs the Prometheus JMX exporter (the Java agent io.prometheus.jmx:
# jmx_prometheus_javaagent from Maven Central, with deploy/monitoring/kafka-jmx.yml): node i
# serves its metrics on 127.0.0.1:29290+i. SECKILL_MONITORING=1 (make monitor PROFILE=cluster)
# also starts a Prometheus of the profile's own on 127.0.0.1:19091 and one
# prometheus-redis-exporter (127.0.0.1:19122) that scrapes each Redis node through its
# multi-target /scrape endpoint; Prometheus scrapes the brokers' agents, the Redis nodes and
# the services of `make run PROFILE=cluster`.

CLUSTER_STATE=$STATE/cluster
CLUSTER_KAFKA_NODES=3
# Kafka node i listens on KAFKA_BASE+i (clients) and CONTROLLER_BASE+i (the KRaft quorum);
# Redis node i on REDIS_BASE+i and, for the cluster bus, REDIS_BASE+i+10000.
CLUSTER_KAFKA_BASE=${SECKILL_CLUSTER_KAFKA_BASE:-29090}
CLUSTER_CONTROLLER_BASE=${SECKILL_CLUSTER_CONTROLLER_BASE:-29190}
CLUSTER_REDIS_NODES=6
CLUSTER_REDIS_BASE=${SECKILL_CLUSTER_REDIS_BASE:-17000}
CLUSTER_MYSQL_DB=seckill_cluster
# Node i's JMX exporter (metrics of the broker) on METRICS_BASE+i.
CLUSTER_KAFKA_METRICS_BASE=${SECKILL_CLUSTER_KAFKA_METRICS_BASE:-29290}
JMX_EXPORTER_VERSION=1.0.1
JMX_EXPORTER_JAR=$CACHE/jmx-exporter-$JMX_EXPORTER_VERSION/jmx_prometheus_javaagent-$JMX_EXPORTER_VERSION.jar
# Three JVMs share the machine with everything else: small heaps (the brokers hold little).
CLUSTER_KAFKA_HEAP=${SECKILL_CLUSTER_KAFKA_HEAP:--Xms256m -Xmx512m}

cluster_kafka_port() { echo $((CLUSTER_KAFKA_BASE + $1)); }
cluster_controller_port() { echo $((CLUSTER_CONTROLLER_BASE + $1)); }
cluster_redis_port() { echo $((CLUSTER_REDIS_BASE + $1)); }
cluster_kafka_metrics_port() { echo $((CLUSTER_KAFKA_METRICS_BASE + $1)); }

cluster_kafka_brokers() {
	local i out=()
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do out+=("127.0.0.1:$(cluster_kafka_port "$i")"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

cluster_redis_addrs() {
	local i out=()
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do out+=("127.0.0.1:$(cluster_redis_port "$i")"); done
	(
		IFS=,
		echo "${out[*]}"
	)
}

# ---------------------------------------------------------------- Redis Cluster

cluster_redis_cli() { # node args...
	local i=$1
	shift
	redis-cli -h 127.0.0.1 -p "$(cluster_redis_port "$i")" "$@"
}

cluster_redis_probe() { [[ $(cluster_redis_cli "$1" ping 2>/dev/null) == PONG ]]; }

# cluster_redis_start I: starts redis-I unless it runs and answers; waits until it answers.
cluster_redis_start() {
	local i=$1 port dir
	port=$(cluster_redis_port "$i")
	dir=$CLUSTER_STATE/redis-$i
	mkdir -p "$dir"
	if pid_alive "$dir/redis.pid" && cluster_redis_probe "$i"; then
		log "redis-$i already running on 127.0.0.1:$port"
		return
	fi
	# The single-node stack's settings (the gate depends on them: stock is never evicted,
	# the AOF bounds a crash's loss to about a second) plus cluster mode. Everything else,
	# cluster-node-timeout (15 s) included, is Redis's default.
	cat >"$dir/redis.conf" <<-EOF
		bind 127.0.0.1
		port $port
		protected-mode yes
		daemonize no
		dir $dir
		logfile $dir/redis.log
		appendonly yes
		appendfsync everysec
		appendfilename "appendonly.aof"
		maxmemory 1gb
		maxmemory-policy noeviction
		cluster-enabled yes
		cluster-config-file nodes.conf
	EOF
	log "starting redis-$i on 127.0.0.1:$port (cluster bus $((port + 10000)))"
	setsid "$(command -v redis-server)" "$dir/redis.conf" >>"$dir/redis.out" 2>&1 </dev/null &
	echo $! >"$dir/redis.pid"
	wait_ready "redis-$i" "$dir/redis.pid" "$dir/redis.log" cluster_redis_probe "$i"
}

cluster_redis_info() { # node field
	cluster_redis_cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}

# The cluster is whole when every node says cluster_state:ok and knows all six nodes.
cluster_redis_ok() {
	local i
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
		[[ $(cluster_redis_info "$i" cluster_state) == ok ]] || return 1
		[[ $(cluster_redis_info "$i" cluster_known_nodes) == "$CLUSTER_REDIS_NODES" ]] || return 1
	done
}

cluster_redis_up() {
	local i
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do cluster_redis_start "$i"; done
	if [[ $(cluster_redis_info 1 cluster_slots_assigned) == 0 && $(cluster_redis_info 1 cluster_known_nodes) == 1 ]]; then
		# Fresh nodes (no slot assigned, knowing only themselves): create the cluster once.
		local nodes=()
		for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do nodes+=("127.0.0.1:$(cluster_redis_port "$i")"); done
		log "creating the redis cluster: 3 primaries, 3 replicas"
		redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
			>"$CLUSTER_STATE/redis-create.log" 2>&1 ||
			{ tail -n 40 "$CLUSTER_STATE/redis-create.log" >&2; die "redis-cli --cluster create failed"; }
	fi
	# Nodes that restarted rejoin from their nodes.conf; a killed primary comes back as a
	# replica of the one promoted in its place. Wait until the cluster agrees it is whole.
	local deadline=$((SECONDS + READY_TIMEOUT))
	until cluster_redis_ok; do
		if ((SECONDS > deadline)); then
			cluster_redis_cli 1 cluster nodes >&2 || true
			die "the redis cluster is not ok after ${READY_TIMEOUT}s (a half-created cluster: 'stack down --profile cluster', remove $CLUSTER_STATE/redis-*, 'stack up --profile cluster')"
		fi
		sleep 0.2
	done
}

# ---------------------------------------------------------------- Kafka (KRaft, 3 nodes)

cluster_kafka_probe() { "$STATE/bin/kafkainit" -brokers "127.0.0.1:$(cluster_kafka_port "$1")" -probe -timeout 2s; }

cluster_kafka_java_opts() { # node
	local dir=$CLUSTER_STATE/kafka-$1 heap
	read -r -a heap <<<"$CLUSTER_KAFKA_HEAP"
	printf '%s\n' "${heap[@]}" -XX:+UseG1GC -Djava.awt.headless=true \
		"-Dlog4j2.configurationFile=$dir/log4j2.properties" -cp "$KAFKA_LIBS/*"
}

# cluster_kafka_configure I: writes node I's configuration and formats its storage once.
cluster_kafka_configure() {
	local i=$1
	local dir=$CLUSTER_STATE/kafka-$i voters=() j
	mkdir -p "$dir"
	for ((j = 1; j <= CLUSTER_KAFKA_NODES; j++)); do voters+=("$j@127.0.0.1:$(cluster_controller_port "$j")"); done
	# Replication settings a replicated production cluster runs with (README, "The cluster
	# profile"): a topic's partitions on all three brokers, a write acknowledged (acks=all)
	# once two hold it, no out-of-sync replica ever elected leader, and Kafka's own topics
	# (group offsets, transactions, share groups) replicated the same way. Everything else
	# is the broker's default, group.initial.rebalance.delay.ms (3 s) included.
	cat >"$dir/server.properties" <<-EOF
		process.roles=broker,controller
		node.id=$i
		controller.quorum.voters=$(
			IFS=,
			echo "${voters[*]}"
		)
		listeners=PLAINTEXT://127.0.0.1:$(cluster_kafka_port "$i"),CONTROLLER://127.0.0.1:$(cluster_controller_port "$i")
		advertised.listeners=PLAINTEXT://127.0.0.1:$(cluster_kafka_port "$i")
		controller.listener.names=CONTROLLER
		inter.broker.listener.name=PLAINTEXT
		listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
		log.dirs=$dir/data
		default.replication.factor=3
		min.insync.replicas=2
		unclean.leader.election.enable=false
		offsets.topic.replication.factor=3
		transaction.state.log.replication.factor=3
		transaction.state.log.min.isr=2
		share.coordinator.state.topic.replication.factor=3
		share.coordinator.state.topic.min.isr=2
	EOF
	kafka_log4j2 "$dir"
	if [[ ! -f $dir/data/meta.properties ]]; then
		local opts
		mapfile -t opts < <(cluster_kafka_java_opts "$i")
		log "formatting kafka-$i storage (cluster $(<"$CLUSTER_STATE/kafka-cluster-id"))"
		java "${opts[@]}" kafka.tools.StorageTool format -t "$(<"$CLUSTER_STATE/kafka-cluster-id")" \
			-c "$dir/server.properties" >"$dir/format.log" 2>&1 ||
			{ tail -n 40 "$dir/format.log" >&2; die "kafka-$i storage format failed"; }
	fi
}

# fetch_jmx_exporter: the JMX exporter's Java agent (one jar) from Maven Central into the cache.
fetch_jmx_exporter() {
	[[ -f $JMX_EXPORTER_JAR ]] && return
	log "fetching the Prometheus JMX exporter $JMX_EXPORTER_VERSION (Java agent) from Maven Central"
	mkdir -p "$CACHE"
	local tmp
	tmp=$(mktemp -d "$CACHE/.jmx-fetch.XXXXXX")
	(cd "$tmp" && mvn -B -q dependency:copy -Dartifact="io.prometheus.jmx:jmx_prometheus_javaagent:$JMX_EXPORTER_VERSION" \
		-DoutputDirectory="$tmp/out" >"$tmp/mvn.log" 2>&1) ||
		{ tail -n 40 "$tmp/mvn.log" >&2; die "maven could not fetch the JMX exporter"; }
	mkdir -p "$(dirname "$JMX_EXPORTER_JAR")"
	# Moved last so an interrupted fetch never leaves a half-written jar behind.
	mv "$tmp/out/jmx_prometheus_javaagent-$JMX_EXPORTER_VERSION.jar" "$JMX_EXPORTER_JAR"
	rm -rf "$tmp"
}

# cluster_kafka_launch I: starts node I unless it runs and answers (no waiting: a node
# answers only once a quorum of controllers is up, so all three are launched first).
cluster_kafka_launch() {
	local i=$1
	local dir=$CLUSTER_STATE/kafka-$i
	if pid_alive "$dir/kafka.pid" && cluster_kafka_probe "$i" >/dev/null 2>&1; then
		log "kafka-$i already running on 127.0.0.1:$(cluster_kafka_port "$i")"
		return
	fi
	if pid_alive "$dir/kafka.pid"; then
		return # started, not answering yet: cluster_kafka_wait waits for it
	fi
	cluster_kafka_configure "$i"
	fetch_jmx_exporter
	local opts
	mapfile -t opts < <(cluster_kafka_java_opts "$i")
	# The JMX exporter's agent, with a copy of its configuration that the node keeps (the
	# agent reloads the file when it changes; a checkout moving under a running broker must
	# not change what it exports).
	cp "$ROOT/deploy/monitoring/kafka-jmx.yml" "$dir/kafka-jmx.yml"
	opts+=("-javaagent:$JMX_EXPORTER_JAR=127.0.0.1:$(cluster_kafka_metrics_port "$i"):$dir/kafka-jmx.yml")
	log "starting kafka-$i on 127.0.0.1:$(cluster_kafka_port "$i") (controller $(cluster_controller_port "$i"), metrics $(cluster_kafka_metrics_port "$i"))"
	setsid java "${opts[@]}" kafka.Kafka "$dir/server.properties" >>"$dir/kafka.out" 2>&1 </dev/null &
	echo $! >"$dir/kafka.pid"
}

# cluster_kafka_quorum: the KRaft quorum's status (LeaderId is the active controller).
cluster_kafka_quorum() {
	java -cp "$KAFKA_LIBS/*" org.apache.kafka.tools.MetadataQuorumCommand \
		--bootstrap-server "$(cluster_kafka_brokers)" describe --status 2>/dev/null
}

cluster_kafka_wait() {
	local i=$1 dir=$CLUSTER_STATE/kafka-$1
	wait_ready "kafka-$i" "$dir/kafka.pid" "$dir/server.log" cluster_kafka_probe "$i"
	grep -q "Kafka version: $KAFKA_VERSION" "$dir/server.log" ||
		die "kafka-$i does not log Kafka version $KAFKA_VERSION"
}

cluster_kafka_build_init() {
	mkdir -p "$STATE/bin"
	(cd "$ROOT" && go build -o "$STATE/bin/kafkainit" ./deploy/local/kafkainit) ||
		die "could not build deploy/local/kafkainit"
}

cluster_kafka_up() {
	local i
	cluster_kafka_build_init
	fetch_kafka
	mkdir -p "$CLUSTER_STATE"
	if [[ ! -s $CLUSTER_STATE/kafka-cluster-id ]]; then
		# One cluster id for the three nodes, in Kafka's base64url-UUID form.
		head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22 >"$CLUSTER_STATE/kafka-cluster-id"
	fi
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do cluster_kafka_launch "$i"; done
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do cluster_kafka_wait "$i"; done
	# All three brokers registered, then the topics: replication factor 3, min ISR 2.
	"$STATE/bin/kafkainit" -brokers "$(cluster_kafka_brokers)" -min-brokers "$CLUSTER_KAFKA_NODES" \
		-replication-factor 3 -min-insync-replicas 2 -timeout 90s >"$CLUSTER_STATE/topics.log" 2>&1 ||
		{ cat "$CLUSTER_STATE/topics.log" >&2; die "kafka topics could not be created on the cluster"; }
}

# ---------------------------------------------------------------- MariaDB (shared server)

cluster_mariadb_up() {
	mariadb_up
	# Its own database on the one server: the cluster's services, lease and demo never
	# meet the single-node stack's.
	mysql_root -e "CREATE DATABASE IF NOT EXISTS \`$CLUSTER_MYSQL_DB\`"
}

# ---------------------------------------------------------------- monitoring (opt-in)
# SECKILL_MONITORING=1 deploy/local/stack up --profile cluster (make monitor PROFILE=cluster):
# a Prometheus of the profile's own (beside the single stack's, which it does not touch) with
# deploy/monitoring/alerts.yml, scraping every instance of `make run PROFILE=cluster` on the
# ports deploy/local/run gives them (gateway i's admin listener 8190+i, consumer i 8290+i,
# reconciler i 8390+i; as many as SECKILL_GATEWAYS, SECKILL_CONSUMERS and SECKILL_RECONCILERS
# say, 2, 3 and 2 by default), the brokers' JMX exporters and each Redis node through one
# prometheus-redis-exporter.

CLUSTER_PROMETHEUS_PORT=${SECKILL_CLUSTER_PROMETHEUS_PORT:-19091}
CLUSTER_REDIS_EXPORTER_PORT=${SECKILL_CLUSTER_REDIS_EXPORTER_PORT:-19122}

# cluster_targets N BASE: the YAML list of 127.0.0.1:BASE+1 .. BASE+N.
cluster_targets() {
	local n=$1 base=$2 i out=()
	for ((i = 1; i <= n; i++)); do out+=("'127.0.0.1:$((base + i))'"); done
	(
		IFS=,
		echo "[${out[*]// /}]"
	)
}

# cluster_prometheus_config FILE TOKEN_FILE: the cluster profile's Prometheus configuration.
cluster_prometheus_config() {
	local file=$1 token=$2 i
	local gateways=${SECKILL_GATEWAYS:-2} consumers=${SECKILL_CONSUMERS:-3} reconcilers=${SECKILL_RECONCILERS:-2}
	{
		cat <<-EOF
			# Written by deploy/local/cluster.sh (cluster_prometheus_config); edit the script, not this file.
			global:
			  scrape_interval: 5s
			  evaluation_interval: 15s
			  external_labels:
			    profile: cluster
			rule_files:
			  - $ROOT/deploy/monitoring/alerts.yml
			scrape_configs:
			  - job_name: seckill-gateway
			    authorization:
			      credentials_file: $token
			    static_configs:
			      - targets: $(cluster_targets "$gateways" 8190)
			  - job_name: seckill-consumer
			    static_configs:
			      - targets: $(cluster_targets "$consumers" 8290)
			  - job_name: seckill-reconciler
			    static_configs:
			      - targets: $(cluster_targets "$reconcilers" 8390)
			  # Every Redis node through the exporter's /scrape?target=...: instance is the node.
			  - job_name: redis
			    metrics_path: /scrape
			    relabel_configs:
			      - source_labels: [__address__]
			        target_label: __param_target
			        replacement: redis://\$1
			      - source_labels: [__address__]
			        target_label: instance
			      - target_label: __address__
			        replacement: 127.0.0.1:$CLUSTER_REDIS_EXPORTER_PORT
			    static_configs:
		EOF
		for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
			printf "      - targets: ['127.0.0.1:%s']\n        labels: {node: redis-%s}\n" "$(cluster_redis_port "$i")" "$i"
		done
		cat <<-EOF
			  # The brokers' JMX exporter agents (deploy/monitoring/kafka-jmx.yml).
			  - job_name: kafka
			    static_configs:
		EOF
		for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do
			printf "      - targets: ['127.0.0.1:%s']\n        labels: {node: kafka-%s}\n" "$(cluster_kafka_metrics_port "$i")" "$i"
		done
		cat <<-EOF
			  - job_name: prometheus
			    static_configs:
			      - targets: ['127.0.0.1:$CLUSTER_PROMETHEUS_PORT']
		EOF
	} >"$file"
}

cluster_monitoring_up() {
	install_monitoring_packages
	local dir=$CLUSTER_STATE/prometheus
	mkdir -p "$dir/data"
	admin_token_file "$dir/admin-token"
	cluster_prometheus_config "$dir/prometheus.yml" "$dir/admin-token"
	redis_exporter_start "$dir" "$CLUSTER_REDIS_EXPORTER_PORT" "redis://127.0.0.1:$(cluster_redis_port 1)" \
		"redis://127.0.0.1:$(cluster_redis_port 1)"
	prometheus_start "$dir" "$CLUSTER_PROMETHEUS_PORT"
}

cluster_monitoring_down() {
	stop_pid prometheus "$CLUSTER_STATE/prometheus/prometheus.pid"
	stop_pid redis_exporter "$CLUSTER_STATE/prometheus/redis_exporter.pid"
}

# cluster_monitoring_status: a line per monitoring process, only once monitoring was started.
cluster_monitoring_status() {
	local dir=$CLUSTER_STATE/prometheus rc=0
	[[ -f $dir/prometheus.pid || -f $dir/redis_exporter.pid ]] || return 0
	status_line prometheus "$dir/prometheus.pid" prometheus_probe "$CLUSTER_PROMETHEUS_PORT" || rc=1
	status_line redis_exporter "$dir/redis_exporter.pid" redis_exporter_probe "$CLUSTER_REDIS_EXPORTER_PORT" \
		"redis://127.0.0.1:$(cluster_redis_port 1)" || rc=1
	return $rc
}

# ---------------------------------------------------------------- commands

cluster_print_env() {
	cat <<-EOF
		export SECKILL_REDIS_ADDR=$(cluster_redis_addrs)
		export SECKILL_MYSQL_DSN='$MYSQL_USER:$MYSQL_PASSWORD@tcp(127.0.0.1:$MYSQL_PORT)/$CLUSTER_MYSQL_DB?parseTime=true&clientFoundRows=true&loc=UTC&charset=utf8mb4&interpolateParams=true'
		export SECKILL_KAFKA_BROKERS=$(cluster_kafka_brokers)
		export SECKILL_CLUSTER=1
		export SECKILL_CLUSTER_REDIS_ADDR=$(cluster_redis_addrs)
		export SECKILL_CLUSTER_KAFKA_BROKERS=$(cluster_kafka_brokers)
	EOF
}

cluster_up() {
	mkdir -p "$STATE" "$CACHE" "$CLUSTER_STATE"
	install_packages
	ensure_packages haproxy:haproxy
	local start=$SECONDS
	cluster_redis_up
	cluster_mariadb_up
	cluster_kafka_up
	if [[ ${SECKILL_MONITORING:-0} == 1 ]]; then
		cluster_monitoring_up
	fi
	cluster_print_env >"$CLUSTER_STATE/env"
	log "cluster ready in $((SECONDS - start))s; variables in $CLUSTER_STATE/env"
}

# The cluster's own nodes only: MariaDB is the single-node stack's server (`stack down`
# stops it).
cluster_down() {
	local i
	cluster_monitoring_down
	# The brokers at once: one after another, the last waits in its controlled shutdown for a
	# quorum that is already gone (and is killed after 30 s).
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do stop_pid "kafka-$i" "$CLUSTER_STATE/kafka-$i/kafka.pid" & done
	wait
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do stop_pid "redis-$i" "$CLUSTER_STATE/redis-$i/redis.pid"; done
}

cluster_status() {
	local rc=0 i role
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
		if status_line "redis-$i" "$CLUSTER_STATE/redis-$i/redis.pid" cluster_redis_probe "$i" >"$CLUSTER_STATE/.status" 2>&1; then
			role=$(cluster_redis_cli "$i" role 2>/dev/null | head -n 1 | tr -d '\r')
			printf '%s  127.0.0.1:%s %s\n' "$(<"$CLUSTER_STATE/.status")" "$(cluster_redis_port "$i")" "${role/slave/replica}"
		else
			cat "$CLUSTER_STATE/.status"
			rc=1
		fi
	done
	rm -f "$CLUSTER_STATE/.status"
	local up=0
	for ((i = 1; i <= CLUSTER_REDIS_NODES; i++)); do
		if cluster_redis_probe "$i"; then
			printf '%-8s cluster_state:%s, %s primaries with slots, %s nodes known (asked redis-%s)\n' "redis" \
				"$(cluster_redis_info "$i" cluster_state)" "$(cluster_redis_info "$i" cluster_size)" \
				"$(cluster_redis_info "$i" cluster_known_nodes)" "$i"
			[[ $(cluster_redis_info "$i" cluster_state) == ok ]] || rc=1
			up=1
			break
		fi
	done
	((up)) || rc=1
	status_line mariadb "$STATE/mariadb/mysqld.pid" mysql_probe || rc=1
	for ((i = 1; i <= CLUSTER_KAFKA_NODES; i++)); do
		if [[ -x $STATE/bin/kafkainit ]]; then
			if status_line "kafka-$i" "$CLUSTER_STATE/kafka-$i/kafka.pid" cluster_kafka_probe "$i" >"$CLUSTER_STATE/.status" 2>&1; then
				printf '%s  127.0.0.1:%s  metrics %s\n' "$(<"$CLUSTER_STATE/.status")" "$(cluster_kafka_port "$i")" \
					"$(curl -fsS -o /dev/null "http://127.0.0.1:$(cluster_kafka_metrics_port "$i")/metrics" 2>/dev/null &&
						echo "127.0.0.1:$(cluster_kafka_metrics_port "$i")" || echo "not served (started without the JMX exporter: stop and start it)")"
			else
				cat "$CLUSTER_STATE/.status"
				rc=1
			fi
		else
			printf '%-8s down\n' "kafka-$i"
			rc=1
		fi
	done
	rm -f "$CLUSTER_STATE/.status"
	if [[ -x $STATE/bin/kafkainit ]] && ((rc == 0)); then
		# The active controller (the KRaft quorum's leader), from Kafka's own tool.
		cluster_kafka_quorum | awk '/^LeaderId:/ {l=$2} /^LeaderEpoch:/ {e=$2} /^MaxFollowerLag:/ {g=$2}
			END {printf "%-8s active controller kafka-%s (epoch %s), max follower lag %s\n", "kraft", l, e, g}' || rc=1
		# Leaders and in-sync replicas of the grab topic's partitions.
		"$STATE/bin/kafkainit" -brokers "$(cluster_kafka_brokers)" -describe -timeout 10s 2>&1 |
			awk '/^topic/ {t=$2} t ~ /seckill.grab$/ {print}' || rc=1
	fi
	cluster_monitoring_status || rc=1
	return $rc
}

# cluster_node_pidfile NODE: the PID file of kafka-1..3 or redis-1..6.
cluster_node_pidfile() {
	case $1 in
	kafka-[1-3]) echo "$CLUSTER_STATE/$1/kafka.pid" ;;
	redis-[1-6]) echo "$CLUSTER_STATE/$1/redis.pid" ;;
	*) die "unknown cluster node '$1' (kafka-1..3, redis-1..6)" ;;
	esac
}

# cluster_node CMD NODE: kill (SIGKILL), stop (SIGTERM) or start one node.
cluster_node() {
	local cmd=$1 node=$2 pidfile pid
	pidfile=$(cluster_node_pidfile "$node")
	case $cmd in
	kill)
		pid_alive "$pidfile" || die "$node is not running"
		pid=$(<"$pidfile")
		log "killing $node (pid $pid, SIGKILL)"
		kill -CONT "$pid" 2>/dev/null || true # a paused process must be able to die
		kill -KILL "$pid"
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
		;;
	stop) stop_pid "$node" "$pidfile" ;;
	start)
		case $node in
		redis-*) cluster_redis_start "${node#redis-}" ;;
		kafka-*)
			[[ -x $STATE/bin/kafkainit ]] || cluster_kafka_build_init
			cluster_kafka_launch "${node#kafka-}"
			cluster_kafka_wait "${node#kafka-}"
			;;
		esac
		;;
	esac
}
