package store

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/go-sql-driver/mysql"
)

// RelayLockName names the order relay's MySQL named lock. A named lock is server-wide, not
// per database, while an outbox is one database's orders table published to one topic: two
// databases on one server (the local stack's single and cluster profiles, tests) are two
// outboxes, and one relay of each must be able to run. So the name holds the database and
// the topic; a name MySQL would refuse (over 64 characters) is replaced by a hash of them.
// A test pauses a relay by taking this lock first.
func RelayLockName(dsn, topic string) string {
	return lockName("seckill.order-relay.", dsn, topic)
}

// lockName is prefix, the DSN's database and what, or prefix and a hash of the two when that
// is longer than the 64 characters MySQL takes.
func lockName(prefix, dsn, what string) string {
	db := ""
	if cfg, err := mysql.ParseDSN(dsn); err == nil {
		db = cfg.DBName
	}
	name := prefix + db + "." + what
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(db + "\x00" + what))
	return prefix + hex.EncodeToString(sum[:16])
}
