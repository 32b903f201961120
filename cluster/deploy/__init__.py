"""Deploy llmfleet beyond one machine: ``ray up`` cluster YAMLs (AWS, GCP, SSH/on-prem),
a Serve config for ``serve deploy``, a KubeRay ``RayService``, all rendered from the one
llmfleet YAML (its ``cluster:`` section); ``plan`` says what a fleet needs before anything
starts and ``validate`` checks the rendered files against Ray's and Kubernetes' schemas."""
