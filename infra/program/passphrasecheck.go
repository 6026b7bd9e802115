package program

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
)

// ErrWrongPassphrase is a passphrase that does not open a stack's
// secrets.
var ErrWrongPassphrase = errors.New("the passphrase given does not open the stack's secrets")

// OpensSecrets checks that the passphrase the stack's commands use (the
// one given, else the state dir's) opens the secrets of a deployment
// (pulumi stack export's "deployment") kept with the passphrase secrets
// provider, as the Pulumi CLI checks it: its state's salt carries
// "pulumi" encrypted under the key. A deployment with no secrets provider,
// or another kind, passes. The passphrase is never in the error.
func (s *Stack) OpensSecrets(ctx context.Context, deployment json.RawMessage) error {
	var d struct {
		SecretsProviders *struct {
			Type  string `json:"type"`
			State struct {
				Salt string `json:"salt"`
			} `json:"state"`
		} `json:"secrets_providers"`
	}
	if err := json.Unmarshal(deployment, &d); err != nil {
		return fmt.Errorf("deployment: %w", err)
	}
	if d.SecretsProviders == nil || d.SecretsProviders.Type != "passphrase" {
		return nil
	}
	backend, err := s.Backend()
	if err != nil {
		return err
	}
	pass, _, err := s.secretsPassphrase(backend)
	if err != nil {
		return err
	}
	parts := strings.SplitN(d.SecretsProviders.State.Salt, ":", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return errors.New("deployment: passphrase secrets provider: malformed salt state")
	}
	salt, err := base64.StdEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("deployment: passphrase secrets provider: salt: %w", err)
	}
	if v, err := config.NewSymmetricCrypterFromPassphrase(pass, salt).DecryptValue(ctx, parts[2]); err != nil || v != "pulumi" {
		return ErrWrongPassphrase
	}
	return nil
}
