//! containerd's CRI (`runtime.v1`) over its Unix socket: one channel, the runtime and image services,
//! each call wrapped so a failure names the RPC. Every call has a deadline so a wedged runtime stalls
//! one pod's sync, never the agent.

pub mod labels;

use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::Request;

use crate::error::{Error, Result};

/// How long an ordinary CRI call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an image pull may take.
const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// Stopping or removing what no longer exists has nothing left to do (the CRI calls are meant to be
/// idempotent; containerd answers NotFound all the same).
fn gone_is_done(call: &'static str, s: tonic::Status) -> Result<()> {
    if s.code() == tonic::Code::NotFound {
        Ok(())
    } else {
        Err(Error::cri(call, s))
    }
}

/// A connection to the container runtime.
#[derive(Clone)]
pub struct Cri {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

fn req<T>(msg: T, timeout: Duration) -> Request<T> {
    let mut r = Request::new(msg);
    r.set_timeout(timeout);
    r
}

impl Cri {
    /// Connects to `endpoint` (`unix:///path/to/socket` or a bare path).
    pub async fn connect(endpoint: &str) -> Result<Cri> {
        let path = endpoint
            .strip_prefix("unix://")
            .unwrap_or(endpoint)
            .to_string();
        // The URI is required by tonic but unused: the connector dials the socket.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }))
            .await
            .map_err(|source| Error::Connect {
                endpoint: endpoint.to_string(),
                source,
            })?;
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    /// `Version`: the runtime's name and version (`containerd`, `1.6.20`).
    pub async fn version(&self) -> Result<VersionResponse> {
        let r = self
            .runtime
            .clone()
            .version(req(VersionRequest::default(), CALL_TIMEOUT))
            .await;
        r.map(|r| r.into_inner())
            .map_err(|s| Error::cri("Version", s))
    }

    /// `Status`: RuntimeReady and NetworkReady.
    pub async fn status(&self) -> Result<RuntimeStatus> {
        let r = self
            .runtime
            .clone()
            .status(req(StatusRequest { verbose: false }, CALL_TIMEOUT))
            .await
            .map_err(|s| Error::cri("Status", s))?;
        Ok(r.into_inner().status.unwrap_or_default())
    }

    /// The runtime's `hosts.toml` directories (containerd's CRI `registry.config_path`, from its
    /// verbose `Status`); empty when it reads none.
    pub async fn registry_config_path(&self) -> Result<String> {
        let r = self
            .runtime
            .clone()
            .status(req(StatusRequest { verbose: true }, CALL_TIMEOUT))
            .await
            .map_err(|s| Error::cri("Status", s))?;
        let config = r.into_inner().info.remove("config").unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&config).unwrap_or_default();
        Ok(v["registry"]["configPath"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// `ListPodSandbox` of every sandbox this agent made.
    pub async fn list_sandboxes(&self) -> Result<Vec<PodSandbox>> {
        let filter = PodSandboxFilter {
            label_selector: labels::managed_selector(),
            ..Default::default()
        };
        let r = self
            .runtime
            .clone()
            .list_pod_sandbox(req(
                ListPodSandboxRequest {
                    filter: Some(filter),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("ListPodSandbox", s))?;
        Ok(r.into_inner().items)
    }

    /// `ListContainers` of every container this agent made.
    pub async fn list_containers(&self) -> Result<Vec<Container>> {
        let filter = ContainerFilter {
            label_selector: labels::managed_selector(),
            ..Default::default()
        };
        let r = self
            .runtime
            .clone()
            .list_containers(req(
                ListContainersRequest {
                    filter: Some(filter),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("ListContainers", s))?;
        Ok(r.into_inner().containers)
    }

    /// `RunPodSandbox` with the runtime `handler` ("" for the runtime's default): the sandbox's id.
    pub async fn run_sandbox(&self, config: PodSandboxConfig, handler: &str) -> Result<String> {
        let r = self
            .runtime
            .clone()
            .run_pod_sandbox(req(
                RunPodSandboxRequest {
                    config: Some(config),
                    runtime_handler: handler.to_string(),
                },
                CALL_TIMEOUT * 4,
            ))
            .await
            .map_err(|s| Error::cri("RunPodSandbox", s))?;
        Ok(r.into_inner().pod_sandbox_id)
    }

    /// `PodSandboxStatus`.
    pub async fn sandbox_status(&self, id: &str) -> Result<PodSandboxStatus> {
        let r = self
            .runtime
            .clone()
            .pod_sandbox_status(req(
                PodSandboxStatusRequest {
                    pod_sandbox_id: id.to_string(),
                    verbose: false,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("PodSandboxStatus", s))?;
        r.into_inner()
            .status
            .ok_or_else(|| Error::Config(format!("runtime returned no status for sandbox {id}")))
    }

    /// `StopPodSandbox` (CNI DEL, the pause container killed).
    pub async fn stop_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .stop_pod_sandbox(req(
                StopPodSandboxRequest {
                    pod_sandbox_id: id.to_string(),
                },
                CALL_TIMEOUT * 2,
            ))
            .await
            .map(|_| ())
            .or_else(|s| gone_is_done("StopPodSandbox", s))
    }

    /// `RemovePodSandbox`.
    pub async fn remove_sandbox(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_pod_sandbox(req(
                RemovePodSandboxRequest {
                    pod_sandbox_id: id.to_string(),
                },
                CALL_TIMEOUT * 2,
            ))
            .await
            .map(|_| ())
            .or_else(|s| gone_is_done("RemovePodSandbox", s))
    }

    /// `CreateContainer`: the container's id.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox_config: PodSandboxConfig,
    ) -> Result<String> {
        let r = self
            .runtime
            .clone()
            .create_container(req(
                CreateContainerRequest {
                    pod_sandbox_id: sandbox_id.to_string(),
                    config: Some(config),
                    sandbox_config: Some(sandbox_config),
                },
                CALL_TIMEOUT * 2,
            ))
            .await
            .map_err(|s| Error::cri("CreateContainer", s))?;
        Ok(r.into_inner().container_id)
    }

    /// `StartContainer`.
    pub async fn start_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .start_container(req(
                StartContainerRequest {
                    container_id: id.to_string(),
                },
                CALL_TIMEOUT * 2,
            ))
            .await
            .map(|_| ())
            .map_err(|s| Error::cri("StartContainer", s))
    }

    /// `StopContainer` with `grace` seconds between SIGTERM and SIGKILL.
    pub async fn stop_container(&self, id: &str, grace: i64) -> Result<()> {
        let deadline = CALL_TIMEOUT + Duration::from_secs(grace.max(0) as u64);
        self.runtime
            .clone()
            .stop_container(req(
                StopContainerRequest {
                    container_id: id.to_string(),
                    timeout: grace.max(0),
                },
                deadline,
            ))
            .await
            .map(|_| ())
            .or_else(|s| gone_is_done("StopContainer", s))
    }

    /// `RemoveContainer`.
    pub async fn remove_container(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .remove_container(req(
                RemoveContainerRequest {
                    container_id: id.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map(|_| ())
            .or_else(|s| gone_is_done("RemoveContainer", s))
    }

    /// `ContainerStatus`.
    pub async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        let r = self
            .runtime
            .clone()
            .container_status(req(
                ContainerStatusRequest {
                    container_id: id.to_string(),
                    verbose: false,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("ContainerStatus", s))?;
        r.into_inner()
            .status
            .ok_or_else(|| Error::Config(format!("runtime returned no status for container {id}")))
    }

    /// `ExecSync`: runs `cmd` in the container and waits at most `timeout`.
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecSyncResponse> {
        let r = self
            .runtime
            .clone()
            .exec_sync(req(
                ExecSyncRequest {
                    container_id: id.to_string(),
                    cmd,
                    timeout: timeout.as_secs().max(1) as i64,
                },
                timeout + CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("ExecSync", s))?;
        Ok(r.into_inner())
    }

    /// `Exec`: the URL of the runtime's streaming server that runs `cmd` in the container.
    pub async fn exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> Result<String> {
        let r = self
            .runtime
            .clone()
            .exec(req(
                ExecRequest {
                    container_id: id.to_string(),
                    cmd,
                    tty,
                    stdin,
                    stdout,
                    stderr,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("Exec", s))?;
        Ok(r.into_inner().url)
    }

    /// `Attach`: the URL of the runtime's streaming server attached to the container's streams.
    pub async fn attach(
        &self,
        id: &str,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> Result<String> {
        let r = self
            .runtime
            .clone()
            .attach(req(
                AttachRequest {
                    container_id: id.to_string(),
                    stdin,
                    tty,
                    stdout,
                    stderr,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("Attach", s))?;
        Ok(r.into_inner().url)
    }

    /// `PortForward`: the URL of the runtime's streaming server forwarding into the sandbox.
    pub async fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        let r = self
            .runtime
            .clone()
            .port_forward(req(
                PortForwardRequest {
                    pod_sandbox_id: sandbox_id.to_string(),
                    port: ports,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("PortForward", s))?;
        Ok(r.into_inner().url)
    }

    /// `ReopenContainerLog`: the runtime closes the container's log file and opens its path again
    /// (after the file was renamed by a rotation).
    pub async fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.runtime
            .clone()
            .reopen_container_log(req(
                ReopenContainerLogRequest {
                    container_id: id.to_string(),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map(|_| ())
            .map_err(|s| Error::cri("ReopenContainerLog", s))
    }

    /// `ListContainerStats` of every container this agent made.
    pub async fn container_stats(&self) -> Result<Vec<ContainerStats>> {
        let filter = ContainerStatsFilter {
            label_selector: labels::managed_selector(),
            ..Default::default()
        };
        let r = self
            .runtime
            .clone()
            .list_container_stats(req(
                ListContainerStatsRequest {
                    filter: Some(filter),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("ListContainerStats", s))?;
        Ok(r.into_inner().stats)
    }

    /// `ImageStatus`: the image when the runtime has it.
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        let r = self
            .images
            .clone()
            .image_status(req(
                ImageStatusRequest {
                    image: Some(image_spec(image)),
                    verbose: false,
                },
                CALL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("ImageStatus", s))?;
        Ok(r.into_inner().image)
    }

    /// `PullImage` with `auth` (None: anonymous): the image's reference (`sha256:…`).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox: Option<PodSandboxConfig>,
    ) -> Result<String> {
        let r = self
            .images
            .clone()
            .pull_image(req(
                PullImageRequest {
                    image: Some(image_spec(image)),
                    auth,
                    sandbox_config: sandbox,
                },
                PULL_TIMEOUT,
            ))
            .await
            .map_err(|s| Error::cri("PullImage", s))?;
        Ok(r.into_inner().image_ref)
    }

    /// `ListImages`.
    pub async fn list_images(&self) -> Result<Vec<Image>> {
        let r = self
            .images
            .clone()
            .list_images(req(ListImagesRequest { filter: None }, CALL_TIMEOUT))
            .await
            .map_err(|s| Error::cri("ListImages", s))?;
        Ok(r.into_inner().images)
    }

    /// `RemoveImage`: the image and every name of it (gone already is done).
    pub async fn remove_image(&self, id: &str) -> Result<()> {
        self.images
            .clone()
            .remove_image(req(
                RemoveImageRequest {
                    image: Some(image_spec(id)),
                },
                CALL_TIMEOUT,
            ))
            .await
            .map(|_| ())
            .or_else(|s| gone_is_done("RemoveImage", s))
    }

    /// `ImageFsInfo`: the filesystems the runtime keeps images on.
    pub async fn image_fs_info(&self) -> Result<Vec<FilesystemUsage>> {
        let r = self
            .images
            .clone()
            .image_fs_info(req(ImageFsInfoRequest {}, CALL_TIMEOUT))
            .await
            .map_err(|s| Error::cri("ImageFsInfo", s))?;
        Ok(r.into_inner().image_filesystems)
    }
}

/// An image reference as CRI takes it.
pub fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}
