package config

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	driver "github.com/go-sql-driver/mysql"
)

// InsecureDevVar is the one development setting under which the services accept
// credentials over plaintext to another host and unverified TLS. Without it they refuse to
// start with a message naming the variable to set (issue 39, item 4).
const InsecureDevVar = "SECKILL_INSECURE_DEV"

// Traffic to this host's loopback never crosses a network: whoever can read it is root on
// the host and can read the secrets from the process anyway. So plaintext with credentials
// to a loopback address (the local stack, the cluster profile, a TLS-terminating sidecar
// in the pod) is allowed without the development setting; anything else needs TLS.

// onThisHost says whether every address of a comma-separated host:port list is a loopback
// address or localhost.
func onThisHost(addrs []string) bool {
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(strings.TrimSpace(a))
		if err != nil {
			host = strings.TrimSpace(a)
		}
		if !loopbackHost(host) {
			return false
		}
	}
	return len(addrs) > 0
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsLoopback()
}

// plaintextRefused is the start-up error for a secret about to cross the network unencrypted.
func plaintextRefused(what, where, fix string) error {
	return fmt.Errorf("%s would cross the network in plaintext to %s (not this host): %s, "+
		"or set %s=1 on a development stack", what, where, fix, InsecureDevVar)
}

// checkMySQLTransport refuses a DSN whose TLS is unverified (tls=skip-verify, tls=preferred,
// which also falls back to plaintext) and one whose password would go to another host
// without TLS. withTLS is SECKILL_MYSQL_TLS; password is SECKILL_MYSQL_PASSWORD ("" = the DSN's).
func checkMySQLTransport(key, dsn, password string, withTLS bool) error {
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil // CheckDSN reports it
	}
	switch strings.ToLower(cfg.TLSConfig) {
	case "skip-verify", "preferred":
		return fmt.Errorf("%s has tls=%s, TLS without verifying the server (a man in the middle reads the password): "+
			"set SECKILL_MYSQL_TLS=true with SECKILL_MYSQL_CA_FILE and remove tls= from the DSN, or set %s=1 on a development stack",
			key, cfg.TLSConfig, InsecureDevVar)
	case "", "false":
	default:
		withTLS = true // tls=true (system roots) or a registered, verified configuration
	}
	if password == "" {
		password = cfg.Passwd
	}
	if withTLS || password == "" || cfg.Net == "unix" || onThisHost([]string{cfg.Addr}) {
		return nil
	}
	return plaintextRefused(fmt.Sprintf("the MySQL password of %s", key), cfg.Addr, "set SECKILL_MYSQL_TLS=true (with SECKILL_MYSQL_CA_FILE)")
}

// checkTransport holds c's Redis and MySQL settings to the rule above (Kafka's are checked
// where they are read, kafkaSecurity).
func (r *reader) checkTransport(c Common) {
	if r.insecureDev() {
		return
	}
	if (c.RedisPassword != "" || c.RedisUsername != "") && c.RedisTLS == nil && !onThisHost(strings.Split(c.RedisAddr, ",")) {
		r.errs = append(r.errs, plaintextRefused("SECKILL_REDIS_PASSWORD", "Redis "+c.RedisAddr,
			"set SECKILL_REDIS_TLS=true (with SECKILL_REDIS_CA_FILE)"))
	}
	if err := checkMySQLTransport("SECKILL_MYSQL_DSN", c.MySQLDSN, c.MySQLPassword, c.MySQLTLS != nil); err != nil {
		r.errs = append(r.errs, err)
	}
	if c.MySQLMigrateDSN != c.MySQLDSN {
		if err := checkMySQLTransport("SECKILL_MYSQL_MIGRATE_DSN", c.MySQLMigrateDSN, c.MySQLMigratePassword, c.MySQLTLS != nil); err != nil {
			r.errs = append(r.errs, err)
		}
	}
}

// insecureDev reads the development setting.
func (r *reader) insecureDev() bool { return r.boolean(InsecureDevVar, false) }
