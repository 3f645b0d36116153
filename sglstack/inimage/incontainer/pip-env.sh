# Sourced by every RUN step that talks to a package index. The extra CA bundle arrives as a BuildKit
# secret (never a layer); it is added to the system bundle in a tmpfs mount that the step discards.
if [ -s /run/secrets/ca_bundle ]; then
  mkdir -p /run/sglstack
  if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    cat /etc/ssl/certs/ca-certificates.crt /run/secrets/ca_bundle > /run/sglstack/ca.pem
  else
    cat /run/secrets/ca_bundle > /run/sglstack/ca.pem
  fi
  export PIP_CERT=/run/sglstack/ca.pem SSL_CERT_FILE=/run/sglstack/ca.pem REQUESTS_CA_BUNDLE=/run/sglstack/ca.pem
fi
# Credentials of the stack's private indexes and wheel URLs: a netrc that arrives as a BuildKit secret, so
# the Dockerfile names only URLs without them, and no layer, RUN line or build log holds one.
if [ -s /run/secrets/index_netrc ]; then
  export NETRC=/run/secrets/index_netrc
fi
if [ -s /run/secrets/hf_token ]; then
  HF_TOKEN="$(cat /run/secrets/hf_token)"
  export HF_TOKEN
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
