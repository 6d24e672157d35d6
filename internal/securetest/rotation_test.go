package securetest

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/segmentio/kafka-go"

	"github.com/seckill-pipeline/seckill/internal/harness"
	"github.com/seckill-pipeline/seckill/internal/stacktest"
	"github.com/seckill-pipeline/seckill/pkg/auth"
	"github.com/seckill-pipeline/seckill/pkg/config"
	"github.com/seckill-pipeline/seckill/pkg/event"
	"github.com/seckill-pipeline/seckill/pkg/stock"
	"github.com/seckill-pipeline/seckill/pkg/store"
)

// The server passwords' rotation of docs/operators.md (Rotating secrets), while a crowd
// grabs through two gateways and a consumer and a reconciler run, every service as users
// made for this test alone (the profile's shared users are never touched):
//
//   - Redis: the user gets the new password beside the old one (an ACL user may have
//     several), the services move to it, the old one is taken away;
//   - MySQL (MariaDB 10.11 has no dual passwords): a second user with the same GRANTs, the
//     services move to it, the first is locked;
//   - Kafka (SCRAM keeps one credential per user and mechanism): a second principal with the
//     same ACLs, the services move to it, the first's credential is deleted.
//
// The services move by a rolling restart, one instance at a time. Every grab answers 202, the
// consumer makes every order, and the old credentials are refused afterwards.
func TestServerPasswordRotationDuringACrowd(t *testing.T) {
	dir := profile(t)
	ctx := stacktest.Context(t, 3*time.Minute)
	id := stacktest.ID(t)
	op := stacktest.NewOpenPrize(t, 1_000_000, 1_000_000, 100)
	brokers, topics := stacktest.Kafka(t)
	secrets := t.TempDir()
	file := func(name, v string) string {
		t.Helper()
		p := filepath.Join(secrets, name)
		if err := os.WriteFile(p+".new", []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil { // as a mounted Secret changes: whole
			t.Fatal(err)
		}
		return p
	}
	password := func() string { return "pw-" + stacktest.ID(t) + stacktest.ID(t) }

	// Redis: one user, two passwords during the overlap.
	redisUser, redisOld, redisNew := "rot-"+id, password(), password()
	rdb := stacktest.Redis(t)
	args := []any{"ACL", "SETUSER", redisUser, "on", ">" + redisOld, "resetkeys", "~sk:*", "resetchannels"}
	for _, r := range strings.Fields(gatewayRedisCommands(t)) {
		args = append(args, r)
	}
	if err := rdb.Do(ctx, append(args, "+hscan")...).Err(); err != nil { // the reconciler's one more
		t.Fatalf("ACL SETUSER %s: %v", redisUser, err)
	}
	t.Cleanup(func() { rdb.Do(context.Background(), "ACL", "DELUSER", redisUser) })

	// MySQL: two users with the services' GRANTs on this test's database.
	dsn, err := mysql.ParseDSN(op.DSN)
	if err != nil {
		t.Fatal(err)
	}
	root, err := sql.Open("mysql", os.Getenv("SECKILL_MYSQL_ROOT_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	mysqlA, mysqlB, mysqlPwA, mysqlPwB := "rot_a_"+id, "rot_b_"+id, password(), password()
	for user, pw := range map[string]string{mysqlA: mysqlPwA, mysqlB: mysqlPwB} {
		for _, q := range []string{
			fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'", user, pw),
			fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.* TO '%s'@'127.0.0.1'", dsn.DBName, user),
		} {
			if _, err := root.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", strings.Split(q, " IDENTIFIED")[0], err)
			}
		}
		t.Cleanup(func() { root.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'127.0.0.1'", user)) })
	}

	// Kafka: two principals with ALL on this test's topics and groups.
	admin := kafkaAdminClient(t, dir, brokers)
	kafkaA, kafkaB, kafkaPwA, kafkaPwB := "rot-a-"+id, "rot-b-"+id, password(), password()
	prefix := strings.TrimSuffix(topics.Grab.Name, ".seckill.grab")
	groups := "t-rot-" + id
	for user, pw := range map[string]string{kafkaA: kafkaPwA, kafkaB: kafkaPwB} {
		setScram(ctx, t, admin, user, pw)
		var acls []kafka.ACLEntry
		for _, r := range []struct {
			typ  kafka.ResourceType
			name string
		}{{kafka.ResourceTypeTopic, prefix}, {kafka.ResourceTypeGroup, groups}} {
			acls = append(acls, kafka.ACLEntry{ResourceType: r.typ, ResourceName: r.name, ResourcePatternType: kafka.PatternTypePrefixed,
				Principal: "User:" + user, Host: "*", Operation: kafka.ACLOperationTypeAll, PermissionType: kafka.ACLPermissionTypeAllow})
		}
		res, err := admin.CreateACLs(ctx, &kafka.CreateACLsRequest{ACLs: acls})
		if err == nil {
			err = errors.Join(res.Errors...)
		}
		if err != nil {
			t.Fatalf("create ACLs of %s: %v", user, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var filters []kafka.DeleteACLsFilter
			for _, a := range acls {
				filters = append(filters, kafka.DeleteACLsFilter{ResourceTypeFilter: a.ResourceType, ResourceNameFilter: a.ResourceName,
					ResourcePatternTypeFilter: a.ResourcePatternType, PrincipalFilter: a.Principal, HostFilter: a.Host,
					Operation: a.Operation, PermissionType: a.PermissionType})
			}
			admin.DeleteACLs(ctx, &kafka.DeleteACLsRequest{Filters: filters})
			admin.AlterUserScramCredentials(ctx, &kafka.AlterUserScramCredentialsRequest{
				Deletions: []kafka.UserScramCredentialsDeletion{{Name: user, Mechanism: kafka.ScramMechanismSha512}}})
		})
	}

	// The services' settings: what a Secret and a ConfigMap would hold. Switching users and
	// passwords changes them; a service reads them when it starts.
	jwt := "rot-jwt-secret-" + id + "-0123456789abcdef"
	settings := func(redisPw, mysqlUser, mysqlPw, kafkaUser, kafkaPw string) map[string]string {
		d := *dsn
		d.User, d.Passwd = mysqlUser, ""
		return map[string]string{
			"SECKILL_REDIS_USERNAME": redisUser, "SECKILL_REDIS_PASSWORD_FILE": file("redis-password", redisPw),
			"SECKILL_MYSQL_DSN": d.FormatDSN(), "SECKILL_MYSQL_PASSWORD_FILE": file("mysql-password", mysqlPw),
			"SECKILL_KAFKA_USERNAME": kafkaUser, "SECKILL_KAFKA_PASSWORD_FILE": file("kafka-password", kafkaPw),
			"SECKILL_TOPIC_PREFIX": prefix, "SECKILL_CONSUMER_GROUP": groups + "-orders", "SECKILL_FEEDBACK_GROUP": groups + "-feedback",
			"SECKILL_RECONCILER_LEASE": "rot-" + id, "SECKILL_ADMIN_TOKEN": "rot-admin-token-" + id, "SECKILL_JWT_SECRET": jwt,
			"SECKILL_RATE_PER_USER": "0", "SECKILL_RATE_PER_IP": "0", "SECKILL_LOG_LEVEL": "warn",
		}
	}
	env := settings(redisOld, mysqlA, mysqlPwA, kafkaA, kafkaPwA)
	type service struct {
		name, addrVar, addr, probe string
		p                          *harness.Proc
	}
	fleet := []*service{
		{name: "consumer", addrVar: "SECKILL_CONSUMER_ADDR", probe: "/readyz"},
		{name: "reconciler", addrVar: "SECKILL_RECONCILER_ADDR", probe: "/readyz"},
		{name: "gateway", addrVar: "SECKILL_GATEWAY_ADDR", probe: "/readyz"},
		{name: "gateway", addrVar: "SECKILL_GATEWAY_ADDR", probe: "/readyz"},
	}
	startService := func(s *service) {
		t.Helper()
		if s.addr == "" {
			s.addr = stacktest.FreeAddr(t)
		}
		e := map[string]string{s.addrVar: s.addr}
		if s.name == "gateway" {
			e["SECKILL_ADMIN_ADDR"] = stacktest.FreeAddr(t)
		}
		for k, v := range env {
			e[k] = v
		}
		s.p = start(t, s.name, e)
		for deadline := time.Now().Add(60 * time.Second); !ready("http://" + s.addr + s.probe); {
			if s.p.Exited() || time.Now().After(deadline) {
				t.Fatalf("%s not ready (exited: %t):\n%s", s.name, s.p.Exited(), s.p.Output())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range fleet {
		startService(s)
	}

	// The crowd: about 15 s of grabs over both gateways; a refused connection (a gateway
	// restarting) is tried on the other.
	signer := auth.NewSigner([]byte(jwt), "seckill", "seckill-gateway")
	const users = 4000
	tokens := make([]string, users)
	for i := range tokens {
		if tokens[i], err = signer.Token(fmt.Sprintf("rot-%d", i), time.Now(), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	crowd := &harness.Crowd{Targets: []string{"http://" + fleet[2].addr, "http://" + fleet[3].addr}, Concurrency: 16,
		RetryBudget: 20 * time.Second, Tokens: func(u int) string { return tokens[u] }, Prizes: []int64{op.PrizeID},
		Session: op.SessionID, Rate: 300}
	clicks := harness.Plan(1, users, users, 1, 0)
	var answers []harness.Answer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); answers = crowd.Fire(ctx, clicks, nil) }()
	time.Sleep(2 * time.Second)

	// 1. The new credentials valid beside the old ones.
	if err := rdb.Do(ctx, "ACL", "SETUSER", redisUser, ">"+redisNew).Err(); err != nil {
		t.Fatal(err)
	}
	// (mysqlB and kafkaB exist already, with their GRANTs and ACLs.)
	// 2. The settings name them, and every service restarts onto them, one at a time.
	env = settings(redisNew, mysqlB, mysqlPwB, kafkaB, kafkaPwB)
	rolled := time.Now()
	for _, s := range fleet {
		if err := s.p.Stop(30 * time.Second); err != nil {
			t.Fatalf("%s: graceful stop: %v\n%s", s.name, err, s.p.Output())
		}
		startService(s)
	}
	t.Logf("every service restarted on the new credentials in %s", time.Since(rolled).Round(10*time.Millisecond))
	// 3. The old credentials go.
	if err := rdb.Do(ctx, "ACL", "SETUSER", redisUser, "<"+redisOld).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := root.ExecContext(ctx, fmt.Sprintf("ALTER USER '%s'@'127.0.0.1' ACCOUNT LOCK", mysqlA)); err != nil {
		t.Fatal(err)
	}
	res, err := admin.AlterUserScramCredentials(ctx, &kafka.AlterUserScramCredentialsRequest{
		Deletions: []kafka.UserScramCredentialsDeletion{{Name: kafkaA, Mechanism: kafka.ScramMechanismSha512}}})
	if err == nil {
		for _, r := range res.Results {
			err = errors.Join(err, r.Error)
		}
	}
	if err != nil {
		t.Fatalf("delete the SCRAM credential of %s: %v", kafkaA, err)
	}
	wg.Wait()
	select {
	case <-ctx.Done():
		t.Fatal("the test ran out of time")
	default:
	}
	if len(answers) != users {
		t.Fatalf("%d answers for %d clicks", len(answers), users)
	}

	// Every grab was admitted, and the consumer (on the new credentials) made every order.
	admitted := map[string]bool{}
	var failed []string
	for _, a := range answers {
		if a.Code != 202 {
			failed = append(failed, fmt.Sprintf("user %d: %d %s after %d attempts", a.User, a.Code, a.Status, a.Attempts))
			continue
		}
		admitted[a.RequestID] = true
	}
	if len(failed) > 0 {
		t.Fatalf("%d grabs failed during the rotation, e.g. %v", len(failed), failed[:min(5, len(failed))])
	}
	var orders int64
	for deadline := time.Now().Add(60 * time.Second); ; {
		if err := op.DB.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE session_id = ? AND prize_id = ?", op.SessionID, op.PrizeID).Row().Scan(&orders); err != nil {
			t.Fatal(err)
		}
		if orders >= int64(len(admitted)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if orders != int64(len(admitted)) {
		t.Fatalf("%d orders for %d admitted grabs", orders, len(admitted))
	}

	// The old credentials are refused to a new connection; the new ones work.
	redisOpts := stacktest.RedisOptions(t, stacktest.RedisAddr())
	for pw, want := range map[string]bool{redisOld: false, redisNew: true} {
		o := redisOpts
		o.Username, o.Password = redisUser, pw
		c, err := stock.Dial(ctx, o)
		if err == nil {
			c.Close()
		}
		if (err == nil) != want {
			t.Errorf("redis as %s with the %s password: %v", redisUser, map[bool]string{false: "old", true: "new"}[want], err)
		}
	}
	for user, pw := range map[string]string{mysqlA: mysqlPwA, mysqlB: mysqlPwB} {
		d := *dsn
		d.User, d.Passwd = user, ""
		conn := stacktest.MySQLConn(t, d.FormatDSN())
		conn.Password = pw
		db, err := store.Connect(ctx, conn)
		if err == nil {
			store.Close(db)
		}
		if (err == nil) != (user == mysqlB) {
			t.Errorf("mysql as %s: %v", user, err)
		}
	}
	for user, pw := range map[string]string{kafkaA: kafkaPwA, kafkaB: kafkaPwB} {
		sec, err := config.LoadKafkaSecurity(func(k string) string {
			switch k {
			case "SECKILL_KAFKA_USERNAME":
				return user
			case "SECKILL_KAFKA_PASSWORD":
				return pw
			case "SECKILL_KAFKA_PASSWORD_FILE":
				return ""
			}
			return os.Getenv(k)
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := event.NewAdmin(brokers, event.AdminSecurity(sec))
		if err == nil {
			err = a.Ping(ctx)
		}
		if (err == nil) != (user == kafkaB) {
			t.Errorf("kafka as %s: %v", user, err)
		}
	}
	t.Logf("%d grabs admitted and ordered through the rotation", len(admitted))
}

// kafkaAdminClient is a kafka-go client as the profile's admin principal (a super user: it
// may manage SCRAM credentials and ACLs).
func kafkaAdminClient(t *testing.T, dir string, brokers []string) *kafka.Client {
	t.Helper()
	sec, err := config.LoadKafkaSecurity(stacktest.Getenv(map[string]string{
		"SECKILL_KAFKA_SASL_MECHANISM": "scram-sha-512", "SECKILL_KAFKA_TLS": "true",
		"SECKILL_KAFKA_CA_FILE":  os.Getenv("SECKILL_KAFKA_CA_FILE"),
		"SECKILL_KAFKA_USERNAME": "admin", "SECKILL_KAFKA_PASSWORD_FILE": filepath.Join(dir, "secrets", "kafka-admin")}))
	if err != nil {
		t.Fatal(err)
	}
	return &kafka.Client{Addr: kafka.TCP(brokers...), Transport: sec.Transport()}
}

// setScram gives user a SCRAM-SHA-512 credential for password, as
// `kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]'` does.
func setScram(ctx context.Context, t *testing.T, admin *kafka.Client, user, password string) {
	t.Helper()
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		t.Fatal(err)
	}
	const iterations = 8192
	salted, err := pbkdf2.Key(sha512.New, password, salt, iterations, sha512.Size)
	if err != nil {
		t.Fatal(err)
	}
	res, err := admin.AlterUserScramCredentials(ctx, &kafka.AlterUserScramCredentialsRequest{
		Upsertions: []kafka.UserScramCredentialsUpsertion{{Name: user, Mechanism: kafka.ScramMechanismSha512,
			Iterations: iterations, Salt: salt, SaltedPassword: salted}}})
	if err == nil {
		for _, r := range res.Results {
			err = errors.Join(err, r.Error)
		}
	}
	if err != nil {
		t.Fatalf("SCRAM credential of %s: %v", user, err)
	}
}
