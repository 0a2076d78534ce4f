package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// WithTLS also serves TLS, on a port of its own (TLSAddr), with a
// self-signed certificate for 127.0.0.1; clients need not present one.
func WithTLS() Option {
	return func(c *config) { c.tls = true }
}

// TLSAddr returns the host:port of the TLS listener (WithTLS), or "".
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(s.tlsPort)
}

// tlsArgs writes a certificate and key into dir and returns the
// redis-server flags that serve TLS on port with them.
func tlsArgs(dir string, port int) ([]string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cert, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, err
	}
	return []string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no"}, nil
}
