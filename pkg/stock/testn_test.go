package stock_test

// testN is the number of stock buckets the tests here give their prizes: it names the keys
// of buckets 1 and above (stock.BucketKeysFor), so every call of one test must use the same.
const testN = 4
