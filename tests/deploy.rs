//! The deployment files are valid for the tools that read them (`promtool check config`,
//! `promtool check rules` and `promtool test rules` on deploy/prometheus/, `rankpulse
//! check-config` on every shipped configuration) and consistent with each other: Kubernetes
//! manifests, the docker compose file, the Dockerfile and Grafana's provisioning.
//!
//! promtool comes with Debian's `prometheus` package and YAML is parsed with python3's PyYAML;
//! the test command (tests/run.sh, README.md) installs both when missing, and without them these
//! tests fail rather than skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(path)
}

/// Runs promtool, failing with a clear message when it is not installed.
fn promtool(args: &[&str], dir: &Path) -> Output {
    Command::new("promtool").args(args).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("cannot run promtool ({e}): install Debian's `prometheus` package (bash tests/run.sh does)")
    })
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Every file in `dir` whose name ends with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(suffix))
        .collect();
    out.sort();
    out
}

/// Whether a command line asks for JSON logs (`--log-format json`, a global option: anywhere).
fn json_logs(args: &[&str]) -> bool {
    args.windows(2).any(|w| w == ["--log-format", "json"])
}

#[test]
fn prometheus_config_passes_promtool_check_config() {
    let out = promtool(&["check", "config", "prometheus.yml"], &deploy("prometheus"));
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    // The config loads both rule files, so `check config` checked them too.
    assert!(text.contains("2 rule files found"), "{text}");
}

#[test]
fn rule_files_pass_promtool_check_rules() {
    let dir = deploy("prometheus/rules");
    let rules = files(&dir, ".yml");
    assert_eq!(rules, ["rankpulse-alerts.yml", "rankpulse-recording.yml"]);
    let args: Vec<&str> = ["check", "rules"].into_iter().chain(rules.iter().map(String::as_str)).collect();
    let out = promtool(&args, &dir);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn rule_unit_tests_pass_promtool_test_rules() {
    let dir = deploy("prometheus/tests");
    let tests = files(&dir, ".test.yml");
    assert!(tests.len() >= 4, "{tests:?}");
    let args: Vec<&str> = ["test", "rules"].into_iter().chain(tests.iter().map(String::as_str)).collect();
    let out = promtool(&args, &dir);
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("SUCCESS").count(), tests.len(), "{text}");
}

/// Every rule (recording and alerting) has a unit test: its name appears in a test file.
#[test]
fn every_rule_is_unit_tested() {
    let tests: String = files(&deploy("prometheus/tests"), ".test.yml")
        .iter()
        .map(|f| std::fs::read_to_string(deploy("prometheus/tests").join(f)).unwrap())
        .collect();
    let mut untested = Vec::new();
    let mut rules = 0;
    for file in ["rankpulse-recording.yml", "rankpulse-alerts.yml"] {
        let text = std::fs::read_to_string(deploy("prometheus/rules").join(file)).unwrap();
        for line in text.lines().map(str::trim) {
            let name = line.strip_prefix("- record: ").or_else(|| line.strip_prefix("- alert: "));
            let Some(name) = name else { continue };
            rules += 1;
            // Constants (thresholds) are tested through the alerts that use them.
            let used_by_a_tested_rule = name.starts_with("rankpulse:alert_");
            if !used_by_a_tested_rule && !tests.contains(name) {
                untested.push(name.to_string());
            }
        }
    }
    assert!(rules >= 50, "only {rules} rules found");
    assert!(untested.is_empty(), "rules without a promtool test: {untested:?}");
}

// ---- Kubernetes, docker compose, Dockerfile and Grafana provisioning ----

/// The documents of a YAML file as JSON, parsed by Python's PyYAML (installed by tests/run.sh).
fn yaml(path: &Path) -> Vec<Value> {
    let script = "import sys, json, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)";
    let out = Command::new("python3").args(["-c", script]).arg(path).output().unwrap_or_else(|e| {
        panic!("cannot run python3 ({e}): install python3 with PyYAML (python3-yaml; bash tests/run.sh does)")
    });
    assert!(out.status.success(), "parsing {}: {}", path.display(), text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `rankpulse check-config` on TOML text; the effective configuration.
fn checked_config(toml_text: &str) -> toml::Value {
    checked_config_with_env(toml_text, &[])
}

/// [`checked_config`] with `RANKPULSE__...` environment overrides, as a container would set them.
fn checked_config_with_env(toml_text: &str, env: &[(String, String)]) -> toml::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rankpulse.toml");
    std::fs::write(&path, toml_text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["check-config", "--config"])
        .arg(&path)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(out.status.success(), "check-config refused:\n{toml_text}\nwith {env:?}\n{}", text(&out));
    toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap()
}

fn port_of(listen: &str) -> u64 {
    listen.rsplit_once(':').unwrap().1.parse().unwrap()
}

#[test]
fn kubernetes_manifests_are_consistent() {
    let dir = deploy("kubernetes");
    let kustomization = &yaml(&dir.join("kustomization.yaml"))[0];
    let listed: Vec<&str> =
        kustomization["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    let mut on_disk = files(&dir, ".yaml");
    on_disk.retain(|f| f != "kustomization.yaml");
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, on_disk, "kustomization.yaml lists every manifest");

    let mut by_kind = std::collections::BTreeMap::new();
    for file in &listed {
        for doc in yaml(&dir.join(file)) {
            by_kind.insert(doc["kind"].as_str().unwrap().to_string(), doc);
        }
    }
    let kinds: Vec<&str> = by_kind.keys().map(String::as_str).collect();
    assert_eq!(kinds, ["ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "ServiceMonitor"]);
    let (config_map, deployment, budget, service, monitor) = (
        &by_kind["ConfigMap"],
        &by_kind["Deployment"],
        &by_kind["PodDisruptionBudget"],
        &by_kind["Service"],
        &by_kind["ServiceMonitor"],
    );

    // Several replicas, replaced one at a time, at most one of them disrupted voluntarily.
    let spec = &deployment["spec"];
    assert!(spec["replicas"].as_u64().unwrap() >= 2, "several replicas: {}", spec["replicas"]);
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 1);
    assert_eq!(budget["spec"]["maxUnavailable"], 1);

    let pod = &deployment["spec"]["template"];
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(&pod["metadata"]["labels"][k], v, "the Deployment selects its pods");
        assert_eq!(&service["spec"]["selector"][k], v, "the Service selects the pods");
        assert_eq!(&budget["spec"]["selector"]["matchLabels"][k], v, "the budget covers the pods");
    }
    let container = &pod["spec"]["containers"][0];

    // The configuration is valid with the environment the container sets, and the rest agrees
    // with it. Dynamic membership: a pod a rollout stops hands its partitions over at once.
    let env = container["env"].as_array().unwrap();
    assert!(env.iter().all(|e| e["name"] != "RANKPULSE__KAFKA__GROUP_INSTANCE_ID"), "dynamic membership");
    // The grace period covers the final snapshot's write (rankpulse allows the brokers 60 s).
    assert!(pod["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap() > 60);
    let settings: Vec<(String, String)> = env
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("RANKPULSE__"))
        .map(|e| {
            let value = e["value"].as_str().unwrap_or("rankpulse-7d4b9c-x2x7q"); // a pod name
            (e["name"].as_str().unwrap().to_string(), value.to_string())
        })
        .collect();
    let (file_name, toml_text) = config_map["data"].as_object().unwrap().iter().next().unwrap();
    let cfg = checked_config_with_env(toml_text.as_str().unwrap(), &settings);
    assert_eq!(cfg["kafka"]["group_instance_id"].as_str(), Some(""));
    let listen_port = port_of(cfg["http"]["listen"].as_str().unwrap());
    assert!(cfg["state"].get("dir").is_none(), "no local state");

    let security = &pod["spec"]["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert!(security["runAsUser"].as_u64().unwrap() > 0);
    let port = container["ports"].as_array().unwrap().iter().find(|p| p["containerPort"] == listen_port);
    let port_name = port.expect("the container exposes http.listen's port")["name"].as_str().unwrap();
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], port_name, "{probe}");
    }
    for resource in ["cpu", "memory"] {
        assert!(container["resources"]["requests"][resource].is_string(), "resource request for {resource}");
    }
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[..2], ["serve", "--config"]);
    assert!(json_logs(&args), "the deployment logs JSON for the log pipeline: {args:?}");
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let mount_of = |volume: &Value| {
        let name = &volume["name"];
        container["volumeMounts"].as_array().unwrap().iter().find(|m| &m["name"] == name).unwrap()["mountPath"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let config_volume = volumes.iter().find(|v| v["configMap"]["name"] == config_map["metadata"]["name"]).unwrap();
    assert_eq!(format!("{}/{file_name}", mount_of(config_volume)), args[2], "--config names the mounted file");
    // Besides the configuration, only read-only Secrets: state lives in the changelog.
    for volume in volumes.iter().filter(|v| v != &config_volume) {
        assert!(volume["secret"]["secretName"].is_string(), "only Secrets beside the configuration: {volume}");
        let mount = container["volumeMounts"].as_array().unwrap().iter().find(|m| m["name"] == volume["name"]);
        assert_eq!(mount.unwrap()["readOnly"], true, "{volume}");
    }
    // The Kafka password is a file of the mounted Secret, where the ConfigMap's example reads it.
    let kafka_secret = volumes.iter().find(|v| v["secret"]["secretName"] == "rankpulse-kafka").expect("a Kafka Secret");
    assert_eq!(kafka_secret["secret"]["optional"], true, "a cluster without Kafka authentication needs no Secret");
    let password_file = format!("\"sasl.password\" = \"{}/kafka-password\"", mount_of(kafka_secret));
    let config_text = config_map["data"][file_name].as_str().unwrap();
    assert!(config_text.contains(&password_file), "the ConfigMap's example reads {password_file}");

    assert_eq!(service["metadata"]["name"], "rankpulse", "the job label the alerts expect");
    let service_port = &service["spec"]["ports"][0];
    assert_eq!(
        (service_port["port"].as_u64(), service_port["targetPort"].as_str()),
        (Some(listen_port), Some(port_name))
    );
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][k], v, "the ServiceMonitor selects the Service");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!((&endpoint["port"], &endpoint["path"]), (&service_port["name"], &Value::from("/metrics")));
}

/// `text` with its commented-out settings uncommented: the lines whose content after `# `
/// starts with one of `starts` (prose comments start otherwise), the `# ` removed so that
/// the indentation is the one the setting would have.
fn uncomment(text: &str, starts: &[&str]) -> String {
    text.lines()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            match line.trim_start().strip_prefix("# ") {
                Some(content) if starts.iter().any(|s| content.trim_start().starts_with(s)) => {
                    format!("{}{content}\n", &line[..indent])
                }
                _ => format!("{line}\n"),
            }
        })
        .collect()
}

/// The Kubernetes files' commented-out HTTPS settings (docs/src/security.md, "Protecting the endpoint"),
/// uncommented, fit together: the Secret the Deployment mounts is the one the ServiceMonitor
/// reads, the configuration's files are in its mount, and the token the ServiceMonitor sends
/// is the file rankpulse reads.
#[test]
fn kubernetes_https_comments_fit_together() {
    let dir = deploy("kubernetes");
    let tmp = tempfile::tempdir().unwrap();
    let uncommented = |file: &str, starts: &[&str]| {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        let out = uncomment(&text, starts);
        assert_ne!(out.trim_end(), text.trim_end(), "{file} has commented-out HTTPS settings");
        let path = tmp.path().join(file);
        std::fs::write(&path, out).unwrap();
        yaml(&path).remove(0)
    };
    let deployment =
        uncommented("deployment.yaml", &["- name: web", "mountPath:", "readOnly:", "secret:", "secretName:"]);
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "web").expect("the web volume");
    let secret = volume["secret"]["secretName"].as_str().unwrap();
    let mount = pod["containers"][0]["volumeMounts"].as_array().unwrap().iter().find(|m| m["name"] == "web").unwrap();
    let mount_path = mount["mountPath"].as_str().unwrap();

    let monitor = uncommented(
        "servicemonitor.yaml",
        &[
            "scheme:",
            "tlsConfig:",
            "serverName:",
            "ca:",
            "secret:",
            "name:",
            "key:",
            "authorization:",
            "type:",
            "credentials:",
        ],
    );
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["tlsConfig"]["ca"]["secret"]["name"], secret);
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    assert_eq!(endpoint["authorization"]["credentials"]["name"], secret);
    let token_key = endpoint["authorization"]["credentials"]["key"].as_str().unwrap();

    let config_map = &yaml(&dir.join("configmap.yaml"))[0];
    let toml_text = config_map["data"]["rankpulse.toml"].as_str().unwrap();
    let starts = ["bearer_token_file", "[http.tls_server_config]", "cert_file", "key_file"];
    let cfg: toml::Value = toml::from_str(&uncomment(toml_text, &starts)).unwrap();
    let http = &cfg["http"];
    let token_file = http["bearer_token_file"].as_str().unwrap();
    assert_eq!(token_file, format!("{mount_path}/{token_key}"), "rankpulse reads the token the ServiceMonitor sends");
    for key in ["cert_file", "key_file"] {
        let file = http["tls_server_config"][key].as_str().unwrap();
        assert!(file.starts_with(&format!("{mount_path}/")), "{key} {file} is in the Secret's mount {mount_path}");
    }
}

/// The host-side source of a compose bind mount whose container path is `target`.
fn bind_source(service: &Value, target: &str) -> Option<PathBuf> {
    service["volumes"].as_array()?.iter().filter_map(Value::as_str).find_map(|v| {
        let mut parts = v.split(':');
        let (source, to) = (parts.next()?, parts.next()?);
        (to == target && source.starts_with('.')).then(|| deploy(source))
    })
}

#[test]
fn compose_file_wires_kafka_rankpulse_prometheus_and_grafana() {
    let compose = &yaml(&deploy("docker-compose.yml"))[0];
    let services = &compose["services"];
    for name in ["kafka", "kafka-topics", "producer", "rankpulse-1", "rankpulse-2", "prometheus", "grafana"] {
        assert!(services[name].is_object(), "service {name}");
    }
    let compose_text = std::fs::read_to_string(deploy("docker-compose.yml")).unwrap();
    assert!(!compose_text.to_lowercase().contains("zookeeper"), "KRaft, no ZooKeeper");
    let kafka = &services["kafka"]["environment"];
    assert_eq!(kafka["KAFKA_PROCESS_ROLES"], "broker,controller", "a single KRaft node");
    let internal = kafka["KAFKA_ADVERTISED_LISTENERS"].as_str().unwrap().split(',').next().unwrap();
    let brokers = internal.split_once("://").unwrap().1;

    // Two rankpulse replicas: the same valid configuration (one consumer group, the broker), no
    // volume but the configuration file, each on its own host port.
    let replicas = ["rankpulse-1", "rankpulse-2"];
    let mut host_ports = Vec::new();
    let mut configs = Vec::new();
    for name in replicas {
        let rankpulse = &services[name];
        let command: Vec<&str> = rankpulse["command"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert_eq!(command[..2], ["serve", "--config"]);
        assert!(json_logs(&command), "{name} logs JSON: {command:?}");
        let config_path = bind_source(rankpulse, command[2]).expect("the --config file is bind-mounted");
        let cfg = checked_config(&std::fs::read_to_string(&config_path).unwrap());
        assert_eq!(cfg["kafka"]["brokers"].as_str(), Some(brokers));
        let volumes = rankpulse["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 1, "{name}: the configuration is its only volume: {volumes:?}");
        let listen_port = port_of(cfg["http"]["listen"].as_str().unwrap());
        let ports = rankpulse["ports"].as_array().unwrap();
        let host_port = ports.iter().find_map(|p| p.as_str()?.strip_suffix(&format!(":{listen_port}"))).unwrap();
        host_ports.push(host_port.to_string());
        configs.push(cfg);
    }
    assert_eq!(configs[0], configs[1], "one configuration, one consumer group");
    assert_ne!(host_ports[0], host_ports[1]);
    assert!(
        host_ports.contains(&"9464".to_string()),
        "the manual's http://localhost:9464/metrics (docs/src/getting-started.md)"
    );
    let cfg = &configs[0];
    let listen_port = port_of(cfg["http"]["listen"].as_str().unwrap());
    for service in ["rankpulse-1", "rankpulse-2", "producer"] {
        let build = &services[service]["build"];
        assert!(deploy(build["context"].as_str().unwrap()).join(build["dockerfile"].as_str().unwrap()).is_file());
    }
    let producer = services["producer"]["command"].as_array().unwrap();
    let at = producer.iter().position(|a| a == "--brokers").unwrap();
    assert!(json_logs(&producer.iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>()), "the producer logs JSON");
    assert_eq!(producer[at + 1].as_str(), Some(brokers));
    let topics_script = services["kafka-topics"]["command"][0].as_str().unwrap();
    for key in ["impressions_topic", "engagements_topic"] {
        assert!(topics_script.contains(cfg["kafka"][key].as_str().unwrap()), "kafka-topics creates {key}");
    }

    // Prometheus: the compose config passes promtool, scrapes rankpulse and loads the shipped rules.
    let prometheus = &services["prometheus"];
    let flag =
        prometheus["command"].as_array().unwrap().iter().find_map(|a| a.as_str()?.strip_prefix("--config.file="));
    let (mount_source, mount_target) =
        prometheus["volumes"].as_array().unwrap()[0].as_str().unwrap().split_once(':').unwrap();
    let mount_target = mount_target.trim_end_matches(":ro");
    let relative =
        flag.unwrap().strip_prefix(&format!("{mount_target}/")).expect("the config is inside the mounted deploy/");
    let prometheus_config = deploy(mount_source).join(relative);
    let out = promtool(&["check", "config", prometheus_config.to_str().unwrap()], &deploy(""));
    assert!(out.status.success(), "{}", text(&out));
    let pconfig = &yaml(&prometheus_config)[0];
    assert_eq!(pconfig["scrape_configs"][0]["job_name"], "rankpulse");
    let targets = &pconfig["scrape_configs"][0]["static_configs"][0]["targets"];
    let want: Vec<String> = replicas.iter().map(|r| format!("{r}:{listen_port}")).collect();
    assert_eq!(targets, &serde_json::json!(want), "Prometheus scrapes both replicas");
    for rule_file in pconfig["rule_files"].as_array().unwrap() {
        let resolved = prometheus_config.parent().unwrap().join(rule_file.as_str().unwrap()).canonicalize().unwrap();
        assert_eq!(resolved.parent().unwrap(), deploy("prometheus/rules").canonicalize().unwrap());
    }

    // Grafana: provisioning and dashboards mounted where the provisioning files say.
    let grafana = &services["grafana"];
    let provisioning = bind_source(grafana, "/etc/grafana/provisioning").unwrap();
    assert_eq!(provisioning, deploy("./grafana/provisioning"));
    let datasource = &yaml(&provisioning.join("datasources/prometheus.yml"))[0]["datasources"][0];
    assert_eq!(datasource["type"], "prometheus");
    assert_eq!(datasource["url"], "http://prometheus:9090");
    assert!(prometheus["ports"].as_array().unwrap().contains(&Value::from("9090:9090")));
    let provider = &yaml(&provisioning.join("dashboards/rankpulse.yml"))[0]["providers"][0];
    let dashboards_path = provider["options"]["path"].as_str().unwrap();
    let dashboards = bind_source(grafana, dashboards_path).expect("the provider's path is mounted");
    assert!(dashboards.join("rankpulse.json").is_file());
    let home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].as_str().unwrap();
    assert_eq!(home, format!("{dashboards_path}/rankpulse.json"));
}

#[test]
fn dockerfile_is_multi_stage_small_and_non_root() {
    let text = std::fs::read_to_string(deploy("Dockerfile")).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    let froms: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage: {froms:?}");
    assert!(froms[0].ends_with(" AS build") && froms[1].contains("-slim"), "{froms:?}");
    let runtime: Vec<&&str> = lines.iter().skip_while(|l| !l.starts_with("FROM debian")).collect();
    assert!(runtime.iter().any(|l| l.starts_with("COPY --from=build ")));
    let user = runtime.iter().find_map(|l| l.strip_prefix("USER ")).expect("USER in the runtime stage");
    assert!(user.split(':').all(|id| id.parse::<u32>().is_ok_and(|id| id > 0)), "non-root numeric USER: {user}");
    assert!(runtime.contains(&&"EXPOSE 9464"), "the default http.listen port");
    assert!(runtime.iter().any(|l| l.starts_with("ENTRYPOINT [\"/usr/local/bin/rankpulse\"]")));
    // Every file copied from the context exists and is not excluded by the ignore file.
    let ignore = std::fs::read_to_string(deploy("Dockerfile.dockerignore")).unwrap();
    let included: Vec<&str> = ignore.lines().filter_map(|l| l.strip_prefix('!')).collect();
    for line in lines.iter().filter(|l| l.starts_with("COPY ") && !l.contains("--from=")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for source in &parts[1..parts.len() - 1] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
            assert!(path.exists(), "COPY source {source} exists");
            assert!(
                included
                    .iter()
                    .any(|i| source.trim_end_matches('/') == i.trim_end_matches('/') || source.starts_with(i)),
                "COPY source {source} is in the build context (Dockerfile.dockerignore)"
            );
        }
    }
    let cmd = runtime.iter().find_map(|l| l.strip_prefix("CMD ")).unwrap();
    let copied_config = runtime.iter().find_map(|l| l.strip_prefix("COPY config/rankpulse.toml ")).unwrap();
    assert!(cmd.contains(&format!("\"--config\", \"{copied_config}\"")), "CMD serves the copied configuration");
    assert!(cmd.contains("\"--log-format\", \"json\""), "the image logs JSON by default: {cmd}");
}
