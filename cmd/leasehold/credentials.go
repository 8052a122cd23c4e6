package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/leasehold/leasehold/webhook"
)

// credentialsFile holds the dev mode's API keys and webhook secrets in
// the data directory, so that a restart keeps them: an exported key, a
// signed-in console and a webhook receiver go on working.
const credentialsFile = "credentials"

// credentials are what credentialsFile keeps, in the forms of
// LEASEHOLD_API_KEYS and LEASEHOLD_WEBHOOK_SECRETS, the variables its
// lines set.
type credentials struct {
	apiKeys        string // tenant:key pairs
	webhookSecrets string // tenant:whsec_<base64> pairs
}

// loadCredentials reads dir's credentials file; a missing file is none.
func loadCredentials(dir string) (credentials, error) {
	b, err := os.ReadFile(filepath.Join(dir, credentialsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return credentials{}, nil
	}
	if err != nil {
		return credentials{}, err
	}
	var c credentials
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, value, _ := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch name {
		case "LEASEHOLD_API_KEYS":
			c.apiKeys = value
		case "LEASEHOLD_WEBHOOK_SECRETS":
			c.webhookSecrets = value
		}
	}
	return c, sc.Err()
}

// save writes c to dir's credentials file, readable by its owner only,
// replacing it whole: a crash mid-write leaves the old file.
func (c credentials) save(dir string) error {
	content := "# The keys and webhook secrets of leasehold dev, reused at every start.\n" +
		"# Delete this file for new ones; leasehold dev --api-keys uses others without changing it.\n" +
		"LEASEHOLD_API_KEYS=" + c.apiKeys + "\n" +
		"LEASEHOLD_WEBHOOK_SECRETS=" + c.webhookSecrets + "\n"
	tmp := filepath.Join(dir, credentialsFile+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, credentialsFile))
}

// newAPIKeys returns keys for the tenant dev and for admin.
func newAPIKeys() string { return "dev:" + rand.Text() + ",admin:" + rand.Text() }

// webhookSecret returns tenant's first webhook secret in c, adding a new
// one to c when it has none.
func (c *credentials) webhookSecret(tenant string) ([]byte, error) {
	secrets, err := webhook.ParseSecrets(c.webhookSecrets)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", credentialsFile, err)
	}
	if s := secrets[tenant]; len(s) > 0 {
		return s[0], nil
	}
	secret := make([]byte, 24)
	_, _ = rand.Read(secret)
	pair := tenant + ":whsec_" + base64.StdEncoding.EncodeToString(secret)
	c.webhookSecrets = strings.TrimPrefix(c.webhookSecrets+","+pair, ",")
	return secret, nil
}

// bannerKeys picks from LEASEHOLD_API_KEYS' pairs the tenant the banner
// shows and its key (the first tenant other than admin, else admin), and
// the admin's key ("" for none).
func bannerKeys(apiKeys string) (tenant, key, adminKey string) {
	for pair := range strings.SplitSeq(apiKeys, ",") {
		t, k, _ := strings.Cut(strings.TrimSpace(pair), ":")
		switch {
		case t == "admin" && adminKey == "":
			adminKey = k
		case t != "admin" && tenant == "":
			tenant, key = t, k
		}
	}
	if tenant == "" {
		tenant, key = "admin", adminKey
	}
	return tenant, key, adminKey
}
