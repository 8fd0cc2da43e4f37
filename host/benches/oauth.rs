//! The cost of checking a JWT access token (`[auth.oauth]`) per request, against no auth,
//! in one run. Target: at most 20 µs added at p50 with the key set cached.
//!
//! 1. In process: `Validator::validate` on ES256 and EdDSA tokens (keys made here with
//!    ring, the JWKS a file of three keys), 20,000 times each after a warm-up: the same
//!    token again and again (as a client sends it with every request: a remembered token),
//!    and 20,000 distinct tokens (each checked in full: first sight); the no-auth baseline
//!    is the same loop taking the token out of its header only.
//! 2. End to end: two `cordon serve --http` on the example tools, one without auth and one
//!    with `[auth.oauth]` (every request carrying a valid ES256 token), loaded by the HTTP
//!    benchmarks' generator in alternating 1 s slices; median latency and server CPU per
//!    request, and their differences.
//!
//! ```sh
//! cargo build -p cordon && cargo xtask guests
//! cargo bench -p cordon --bench oauth --profile dev
//! ```

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use cordon::auth::jwks::JwksSource;
use cordon::auth::oauth::{OAuthSettings, Validator};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::json;
use support::http::{Subject, free_port, wait_for};

const ISSUER: &str = "https://idp.example.com";
const AUDIENCE: &str = "https://mcp.example.com/mcp";
const ITERATIONS: usize = 20_000;
const WARM_UP: usize = 1000;
const ROUNDS: u32 = 5;
const SLICE: Duration = Duration::from_secs(1);

fn main() {
    let rng = ring::rand::SystemRandom::new();
    let es_pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let es = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, es_pkcs8.as_ref(), &rng).unwrap();
    let point = es.public_key().as_ref();
    let ed_pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
    let ed = Ed25519KeyPair::from_pkcs8(ed_pkcs8.as_ref()).unwrap();
    let other = Ed25519KeyPair::from_pkcs8(Ed25519KeyPair::generate_pkcs8(&rng).unwrap().as_ref()).unwrap();
    let jwks = json!({"keys": [
        {"kty": "EC", "crv": "P-256", "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..]), "kid": "es", "alg": "ES256"},
        {"kty": "OKP", "crv": "Ed25519", "x": B64.encode(ed.public_key().as_ref()), "kid": "ed", "alg": "EdDSA"},
        {"kty": "OKP", "crv": "Ed25519", "x": B64.encode(other.public_key().as_ref()), "kid": "other"},
    ]});
    let dir = std::env::temp_dir().join(format!("cordon-bench-oauth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let jwks_file = dir.join("jwks.json");
    std::fs::write(&jwks_file, jwks.to_string()).unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "user-1", "org": "acme", "scope": "tools",
        "iat": now, "exp": now + 3600});
    // `jti` makes each token distinct.
    let sign = |algorithm, kid: &str, key: &EncodingKey, jti: usize| {
        let mut header = Header::new(algorithm);
        header.kid = Some(kid.to_owned());
        let mut claims = claims.clone();
        claims["jti"] = json!(jti);
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    };
    let es_key = EncodingKey::from_ec_der(es_pkcs8.as_ref());
    let ed_key = EncodingKey::from_ed_der(ed_pkcs8.as_ref());
    let many = |algorithm, kid: &str, key: &EncodingKey| -> Vec<String> {
        (0..ITERATIONS + WARM_UP).map(|jti| sign(algorithm, kid, key, jti)).collect()
    };
    let es_tokens = many(Algorithm::ES256, "es", &es_key);
    let ed_tokens = many(Algorithm::EdDSA, "ed", &ed_key);

    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    in_process(&tokio, &jwks_file, &es_tokens, &ed_tokens);
    end_to_end(&tokio, &jwks_file, &es_tokens[0]);
}

fn settings(jwks_file: &std::path::Path) -> OAuthSettings {
    OAuthSettings::new(
        ISSUER.into(),
        AUDIENCE.into(),
        JwksSource::File(jwks_file.to_owned()),
        "org".into(),
        vec!["tools".into()],
    )
}

fn percentiles(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[times.len() / 2], times[times.len() * 99 / 100])
}

fn in_process(
    tokio: &tokio::runtime::Runtime,
    jwks_file: &std::path::Path,
    es_tokens: &[String],
    ed_tokens: &[String],
) {
    let validator = tokio.block_on(Validator::start(settings(jwks_file))).unwrap();
    let headers = |tokens: &[String]| -> Vec<http::HeaderValue> {
        tokens.iter().map(|token| http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap()).collect()
    };
    // Each round takes the next header of `values` (cycling), then checks it or not.
    let measure = |values: &[http::HeaderValue], check: bool| -> (Duration, Duration) {
        tokio.block_on(async {
            let mut times = Vec::with_capacity(ITERATIONS);
            for round in 0..ITERATIONS + WARM_UP {
                let value = &values[round % values.len()];
                let started = Instant::now();
                let bearer = std::hint::black_box(value).to_str().unwrap().strip_prefix("Bearer ").unwrap();
                if check {
                    let claims = validator.validate(bearer).await.unwrap();
                    std::hint::black_box(claims);
                } else {
                    std::hint::black_box(bearer);
                }
                if round >= WARM_UP {
                    times.push(started.elapsed());
                }
            }
            percentiles(times)
        })
    };
    let (none50, none99) = measure(&headers(&es_tokens[..1]), false);
    println!("no auth (token taken from its header only)   p50 {none50:>9.2?}  p99 {none99:>9.2?}");
    for (label, tokens) in [("ES256", es_tokens), ("EdDSA", ed_tokens)] {
        let (first50, first99) = measure(&headers(tokens), true);
        let (again50, again99) = measure(&headers(&tokens[..1]), true);
        let added = |p50: Duration| p50.saturating_sub(none50).as_secs_f64() * 1e6;
        println!(
            "JWT {label}, cached JWKS, token seen before   p50 {again50:>9.2?}  p99 {again99:>9.2?}  added at p50 {:.2} us (target <= 20 us)",
            added(again50)
        );
        println!(
            "JWT {label}, cached JWKS, first sight         p50 {first50:>9.2?}  p99 {first99:>9.2?}  added at p50 {:.2} us",
            added(first50)
        );
    }
    assert_eq!(validator.keys().reads(), 1, "every check was served from the cached key set");
}

fn end_to_end(tokio: &tokio::runtime::Runtime, jwks_file: &std::path::Path, token: &str) {
    let (root, cordon) = support::cordon();
    let plain_config = support::examples_config(&root, "auth-none", "max_concurrent_calls = 64\n");
    let oauth_config = std::env::temp_dir().join("cordon-bench-oauth-oauth.toml");
    let mut text = std::fs::read_to_string(&plain_config).unwrap();
    text.push_str(&format!(
        "\n[auth.oauth]\nissuer = {ISSUER:?}\naudience = {AUDIENCE:?}\njwks = {{ file = {:?} }}\n\
         tenant_claim = \"org\"\nrequired_scopes = [\"tools\"]\n",
        jwks_file.display().to_string()
    ));
    std::fs::write(&oauth_config, text).unwrap();
    let spawn = |config: &std::path::Path, port: u16| {
        Command::new(&cordon)
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
            .arg(config)
            .env("CORDON_LOG", "warn")
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (plain_port, oauth_port) = (free_port(), free_port());
    let plain = spawn(&plain_config, plain_port);
    let oauth = spawn(&oauth_config, oauth_port);
    wait_for(plain_port);
    wait_for(oauth_port);
    let mut subjects = [
        Subject::new("cordon, no auth", plain, plain_port),
        Subject::new("cordon, [auth.oauth] ES256 token", oauth, oauth_port)
            .with_headers(&format!("Authorization: Bearer {token}\r\n")),
    ];
    for _ in 0..ROUNDS {
        for subject in &mut subjects {
            subject.slice(tokio, SLICE);
        }
    }
    let [none, jwt] = subjects.map(Subject::report);
    let micros = |duration: Duration| duration.as_secs_f64() * 1e6;
    println!(
        "JWT / no auth: median latency {:.3}x ({:+.1} us), server CPU per request {:+.1} us, throughput {:.3}x",
        micros(jwt.median) / micros(none.median),
        micros(jwt.median) - micros(none.median),
        micros(jwt.cpu_per_request) - micros(none.cpu_per_request),
        jwt.rate / none.rate,
    );
}
