"""Every submit command of HTCondor 25.14, and what ``mwpy jobs`` does with it: honoured, or refused.

The list is HTCondor's own: the commands ``condor_submit`` looks up (the
keyword table and the ``submit_param`` calls of
``src/condor_utils/submit_utils.{h,cpp}`` at tag v25.14.0, the version of the
``htcondor2`` bindings mwpy installs), each with the other spellings
``condor_submit`` accepts for it (mostly the job attribute's name, such as
``PeriodicRelease`` for ``periodic_release``). Families are matched by prefix
(``request_<name>``, ``+Attr``/``MY.Attr``, ``ec2_tag_<name>``, ...).

There are two kinds and no third: a command is **honoured** (its effect on
the job, its files, its exit and its log is Condor's; some commands only for
some values, checked per job) or **refused** before any job runs, with one
line saying why. Any other name is a macro, as for ``condor_submit``; one
that no value uses gets ``condor_submit``'s warning ("... was unused by
condor_submit. Is it a typo?"). docs/jobs.md's command table is
:func:`markdown_table`'s output (tests/test_jobs_commands.py holds them
together).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Command:
    """One submit command: its name, the other spellings Condor accepts, and what mwpy does with it."""

    name: str
    aliases: tuple[str, ...]
    honoured: bool
    how: str  # honoured: what mwpy does; refused: why


@attrs.frozen
class _Row:
    honoured: bool
    how: str
    commands: str  # "name(Alias Alias) name ..."


# Each row: honoured?, what mwpy does (or why not), the commands (aliases in parentheses).
_ROWS = (
    _Row(
        True,
        "the job's program: `vanilla` only (any other universe is refused); a transferred executable is sent "
        "once per slave and runs from the scratch folder; `transfer_executable = false` runs it by its path "
        "(relative to the scratch folder, as Condor does)",
        "universe(JobUniverse) executable(Cmd) transfer_executable(TransferExecutable)",
    ),
    _Row(
        True,
        "both syntaxes (old: spaces, `\\\"`; new: in double quotes, `'...'`, `''` and `\"\"`)",
        "arguments(Args) arguments2 environment(env) environment2",
    ),
    _Row(
        True,
        "`getenv = true` copies the environment `mwpy jobs` was started in (not mwpy's own changes to it, such as "
        "the `CONDOR_CONFIG=/dev/null` HTCondor's bindings set where no configuration is found); a list of names "
        "and `*` patterns "
        "(separated by commas, semicolons or spaces, matched without regard to case) copies those variables, "
        "and a `!` member keeps one out (`getenv = !PATH` copies all but `PATH`), as condor_submit reads it; "
        "the job's `environment` wins",
        "getenv(get_env)",
    ),
    _Row(
        True,
        "stdin, stdout, stderr; relative to `initialdir`; a missing folder is made by the file transfer, and "
        "holds a job that runs in place (code 7), as Condor's starter holds it; "
        "`transfer_input/output/error = false` uses the path as it is on the execute side",
        "input(In stdin) output(Out stdout) error(Err stderr) transfer_input(TransferIn) "
        "transfer_output(TransferOut) transfer_error(TransferErr)",
    ),
    _Row(
        True,
        "relative to the folder `mwpy jobs` runs in; it must exist",
        "initialdir(Iwd initial_dir job_iwd)",
    ),
    _Row(
        True,
        "files, `dir` and `dir/`, with their modes; `transfer_common_input` files are fetched once per slave "
        "and kept, like every shared input, and arrive read-only as HTCondor 25 hands them over; "
        "`preserve_relative_paths` keeps `a/b` as `a/b`; "
        "`skip_filechecks` leaves missing inputs to hold their job when its files are sent, as Condor holds it",
        "transfer_input_files(TransferInput TransferInputFiles) transfer_common_input(CommonInputFiles) "
        "preserve_relative_paths(PreserveRelativePaths) skip_filechecks",
    ),
    _Row(
        True,
        'files and folders, or every new or changed top-level file when absent or empty (`""`: none, as '
        "the manual says); `transfer_output_remaps` "
        "renames them (`name = path` pairs, `;`-separated); `should_transfer_files = NO` runs the job in "
        "`initialdir`; `when_to_transfer_output = ON_SUCCESS` returns outputs only after a successful exit "
        "(`success_exit_code`, else 0)",
        "transfer_output_files(TransferOutput TransferOutputFiles) transfer_output_remaps(TransferOutputRemaps) "
        "should_transfer_files(ShouldTransferFiles) when_to_transfer_output(WhenToTransferOutput)",
    ),
    _Row(
        True,
        "`true` (the default) only: a job run again starts with empty stdout and stderr files",
        "erase_output_and_error_on_restart(EraseOutputAndErrorOnRestart)",
    ),
    _Row(
        True,
        "`false` (the default) only: streams come back when the job ends",
        "stream_input(StreamIn) stream_output(StreamOut) stream_error(StreamErr)",
    ),
    _Row(
        True,
        "every form, with queue variables of any name (also command names), slices, several `queue` statements "
        "(one cluster, as HTCondor 23 runs them; HTCondor 24 and later refuse them, and mwpy jobs warns), a "
        "count that is an expression; statements that queue nothing (`queue 0`, an empty item list) get "
        "condor_submit's warning and exit status 0, and nothing runs; `max_materialize` and `max_idle` bound "
        "how many jobs are made ahead of the results",
        "queue max_materialize(JobMaterializeLimit) max_idle(JobMaterializeMaxIdle materialize_max_idle)",
    ),
    _Row(
        True,
        "HTCondor's user log (submitted, executing, evicted and requeued, terminated, held, released, "
        "aborted), readable by `htcondor2.JobEventLog` and `condor_wait`; `submit_event_notes` goes into the "
        "submitted event; `log_xml = true` is refused",
        "log(UserLog) log_xml(UserLogUseXML) submit_event_notes(SubmitEventNotes)",
    ),
    _Row(
        True,
        "evaluated with HTCondor's ClassAd library against the job's ad, as the shadow and the schedd "
        "do: a job is held (with its reason and codes), released, run again or removed when Condor would",
        "on_exit_remove(OnExitRemove) on_exit_hold(OnExitHold) on_exit_hold_reason(OnExitHoldReason) "
        "on_exit_hold_subcode(OnExitHoldSubCode) periodic_hold(PeriodicHold) "
        "periodic_hold_reason(PeriodicHoldReason) periodic_hold_subcode(PeriodicHoldSubCode) "
        "periodic_release(PeriodicRelease) periodic_remove(PeriodicRemove) max_retries(JobMaxRetries) "
        "retry_until success_exit_code(JobSuccessExitCode) allowed_job_duration(AllowedJobDuration) "
        "allowed_execute_duration(AllowedExecuteDuration) hold",
    ),
    _Row(
        True,
        "how a running job is stopped (held: `hold_kill_sig`, removed: `remove_kill_sig`, else `kill_sig`), then "
        "SIGKILL after the timeout",
        "kill_sig(KillSig) remove_kill_sig(RemoveKillSig) hold_kill_sig(HoldKillSig) "
        "kill_sig_timeout(KillSigTimeout) job_max_vacate_time(JobMaxVacateTime)",
    ),
    _Row(
        True,
        "the job's placement: jobs are grouped by what they ask for (`+` attributes that `requirements` "
        "or `rank` use included), and each task carries its group; with local slaves they are noted once",
        "requirements rank(preferences Rank) request_cpus(RequestCpus) request_memory(RequestMemory) "
        "request_disk(RequestDisk) request_gpus(RequestGPUs) request_<name> require_gpus(RequireGPUs) "
        "require_<name> gpus_minimum_capability(GPUsMinCapability) gpus_maximum_capability(GPUsMaxCapability) "
        "gpus_minimum_memory(GPUsMinMemory) gpus_minimum_runtime(GPUsMinRuntime) cuda_version(CUDAVersion) "
        "request_gpu_memory request_gpus_memory image_size(ImageSize) disk_usage(DiskUsage)",
    ),
    _Row(
        True,
        "job attributes: in the job's ad, where policy expressions and `requirements` see them",
        "+<name> MY.<name>",
    ),
    _Row(
        True,
        "the batch's name (`batch_name`, else `description`, as condor_q names a batch): shown by `mwpy status` "
        "and in the summary's last line (`batch`)",
        "batch_name(JobBatchName) description(JobDescription)",
    ),
    _Row(
        True,
        "the same value for every job only (jobs of one cluster then run in queue order, as Condor runs "
        "them); a priority that differs between jobs is refused",
        "priority(JobPrio prio)",
    ),
    _Row(
        True,
        "`never` (the default) only: mwpy sends no e-mail, so `notify_user` and `email_attributes` "
        "are only accepted beside it",
        "notification(JobNotification) notify_user(NotifyUser) email_attributes(EmailAttributes)",
    ),
    _Row(
        True,
        "the core-file size limit of the job's processes",
        "core_size(CoreSize)",
    ),
    _Row(
        False,
        "accounting belongs to the slave jobs that run the tasks, not to tasks (put it in the slaves' submit file)",
        "accounting_group(AccountingGroup) accounting_group_user(AcctGroupUser) nice_user(NiceUser) "
        "project_name(ProjectName) concurrency_limits(ConcurrencyLimits concurrency_limits_expr)",
    ),
    _Row(
        False,
        "mwpy runs vanilla-universe programs on its own slaves: containers, VMs, Java, parallel and grid "
        "jobs need Condor's starter or gridmanager",
        "docker_image(DockerImage) docker_network_type(DockerNetworkType) "
        "docker_override_entrypoint(DockerOverrideEntrypoint) docker_pull_policy(DockerPullPolicy) "
        "docker_send_credentials(DockerSendCredentials) container_image(ContainerImage) "
        "container_is_common(ContainerIsCommon) container_service_names(ContainerServiceNames) "
        "container_target_dir(ContainerTargetDir) transfer_container(TransferContainer) "
        "<service>_container_port <service>_HostPort want_job_networking(WantJobNetworking) "
        "mount_under_scratch(MountUnderScratch) "
        "vm_type(JobVMType) vm_memory(JobVMMemory) vm_vcpus(JobVM_VCPUS) vm_disk vm_checkpoint(JobVMCheckpoint) "
        "vm_networking(JobVMNetworking) vm_networking_type(JobVMNetworkingType) vm_macaddr(JobVM_MACADDR) "
        "vm_no_output_vm vm_vnc(JobVMVNCConsole) xen_kernel xen_initrd xen_root xen_kernel_params "
        "jar_files(JarFiles) java_vm_arguments(java_vm_args JavaVMArgs) java_vm_arguments2 "
        "machine_count(MachineCount node_count NodeCount) WantParallelScheduling rendezvousdir "
        "parallel_script_shadow(ParallelScriptShadow) parallel_script_starter(ParallelScriptStarter) "
        "grid_resource(GridResource) remote_<name>(Remote_<name>) remote_initialdir(RemoteIwd) WantNameTag "
        "batch_extra_submit_args(BatchExtraSubmitArgs) batch_project(BatchProject) batch_queue(BatchQueue) "
        "batch_runtime(BatchRuntime) arc_application(ArcApplication) arc_data_staging(ArcDataStaging) "
        "arc_resources(ArcResources) arc_rte(ArcRte) "
        "aws_access_key_id_file(ec2_access_key_id EC2AccessKeyId gs_access_key_id_file s3_access_key_id_file) "
        "aws_secret_access_key_file(ec2_secret_access_key EC2SecretAccessKey gs_secret_access_key_file "
        "s3_secret_access_key_file) aws_region(AWSRegion) "
        "azure_admin_key(AzureAdminKey) azure_admin_username(AzureAdminUsername) azure_auth_file(AzureAuthFile) "
        "azure_image(AzureImage) azure_location(AzureLocation) azure_size(AzureSize) "
        "ec2_ami_id(EC2AmiID) ec2_availability_zone(EC2AvailabilityZone) "
        "ec2_block_device_mapping(EC2BlockDeviceMapping) ec2_ebs_volumes(EC2ElasticBlockStorageVolumes) "
        "ec2_elastic_ip(EC2ElasticIp) ec2_iam_profile_arn(EC2IamProfileArn) "
        "ec2_iam_profile_name(EC2IamProfileName) ec2_instance_type(EC2InstanceType) "
        "ec2_keypair(ec2_keyp_air EC2KeyPair) ec2_keypair_file(ec2_key_pair_file EC2KeyPairFile) "
        "ec2_parameter_names(EC2ParamNames) ec2_parameter_<name> ec2_security_groups(EC2SecurityGroups) "
        "ec2_security_ids(EC2SecurityIDs) ec2_spot_price(EC2SpotPrice) ec2_tag_names(EC2TagNames) "
        "ec2_tag_<name> ec2_user_data(EC2UserData) ec2_user_data_file(EC2UserDataFile) ec2_vpc_ip(EC2VpcIp) "
        "ec2_vpc_subnet(EC2VpcSubnet) cloud_label_names cloud_label_<name> "
        "gce_account(GceAccount) gce_auth_file(GceAuthFile) gce_image(GceImage) gce_json_file(GceJsonFile) "
        "gce_machine_type(GceMachineType) gce_metadata(GceMetadata) gce_metadata_file(GceMetadataFile) "
        "gce_preemptible(GcePreemptible)",
    ),
    _Row(
        False,
        "credentials are delegated by Condor's shadow and credd, which do not run mwpy's tasks",
        "x509userproxy use_x509userproxy DelegateJobGSICredentialsLifetime(delegate_job_gsi_credentials_lifetime) "
        "use_scitokens(use_scitoken) scitokens_file(ScitokensFile) use_oauth_services(UseOAuthServices) "
        "<service>_oauth_permissions <service>_oauth_resource",
    ),
    _Row(
        False,
        "files move through mwpy's own file service only: no plugins, URLs, encryption settings, "
        "checkpoint storage or size caps of Condor's",
        "transfer_plugins(TransferPlugins) output_destination(OutputDestination) "
        "output_directory(OutputDirectory) checkpoint_destination(CheckpointDestination) "
        "public_input_files(PublicInputFiles) encrypt_input_files(EncryptInputFiles) "
        "encrypt_output_files(EncryptOutputFiles) dont_encrypt_input_files(DontEncryptInputFiles) "
        "dont_encrypt_output_files(DontEncryptOutputFiles) encrypt_execute_directory(EncryptExecuteDirectory) "
        "max_transfer_input_mb(MaxTransferInputMB) max_transfer_output_mb(MaxTransferOutputMB) "
        "manifest(ManifestDesired) manifest_dir(ManifestDir)",
    ),
    _Row(
        False,
        "a self-checkpointing job needs Condor's checkpoint transfer and restart (write the job to resume "
        "from its own files, or run it with condor_submit)",
        "checkpoint_exit_code(SuccessCheckpointExitCode) transfer_checkpoint_files(TransferCheckpoint)",
    ),
    _Row(
        False,
        "standard-universe remote I/O and file remapping, which mwpy's slaves do not provide",
        "want_io_proxy(WantIOProxy) file_remaps(FileRemaps) buffer_files(BufferFiles) buffer_size(BufferSize) "
        "buffer_block_size(BufferBlockSize) fetch_files(FetchFiles) compress_files(CompressFiles) "
        "append_files(AppendFiles) local_files(LocalFiles)",
    ),
    _Row(
        False,
        "start times are the schedd's and startd's: mwpy starts a job as soon as a slave is free",
        "deferral_time(DeferralTime) cron_window(CronWindow deferral_window DeferralWindow) "
        "cron_prep_time(CronPrepTime deferral_prep_time DeferralPrepTime) cron_minute(CronMinute) "
        "cron_hour(CronHour) cron_day_of_month(CronDayOfMonth) cron_month(CronMonth) "
        "cron_day_of_week(CronDayOfWeek) next_job_start_delay(NextJobStartDelay) "
        "suspend_job_at_exec(SuspendJobAtExec)",
    ),
    _Row(
        False,
        "claims, leases, vacating and retirement are the schedd's and startd's dealings with a slot; mwpy's "
        "slaves keep their slots and jobs are never evicted",
        "keep_claim_idle(KeepClaimIdle) job_lease_duration(JobLeaseDuration) "
        "max_job_retirement_time(MaxJobRetirementTime) want_graceful_removal(WantGracefulRemoval) "
        "periodic_vacate(PeriodicVacate) on_evict_checks(TransformOnEvict) retry_request_memory "
        "retry_request_memory_increase retry_request_memory_max retry_request_disk leave_in_queue(LeaveJobInQueue) "
        "job_machine_attrs(JobMachineAttrs) job_machine_attrs_history_length(JobMachineAttrsHistoryLength) "
        "match_list_length(LastMatchListLength)",
    ),
    _Row(
        False,
        "the user log has HTCondor's standard events only (no extra attributes in them)",
        "ulog_execute_attrs(UserLogExecuteEventAttrs) job_ad_information_attrs(JobAdInformationAttrs) "
        "submit_event_user_notes(SubmitEventUserNotes) submit_event_notes_attrs(SubmitEventNotesAttrs)",
    ),
    _Row(
        False,
        "these belong to DAGMan, job sets and Condor's own tools, not to a submit file run by mwpy",
        "dagman_log(DAGManNodesLog) dagman_job_id(DAGManJobId) dag_node_name(DAGNodeName) "
        "skip_if_dataflow(SkipIfDataflow) jobset(JobSetName) batch_id(JobBatchId) noop_job(IsNoopJob) "
        "noop_job_exit_code(NoopJobExitCode) noop_job_exit_signal(NoopJobExitSignal) "
        "interactive_executable interactive_args shell starter_debug(JobStarterDebug) "
        "starter_log(JobStarterLog) tool_daemon_cmd(ToolDaemonCmd) "
        "tool_daemon_arguments(tool_daemon_args tool_daemon_arguments2 ToolDaemonArgs) "
        "tool_daemon_input(ToolDaemonInput) tool_daemon_output(ToolDaemonOutput) "
        "tool_daemon_error(ToolDaemonError)",
    ),
    _Row(
        False,
        "jobs run as the slave's user, with the slave's account and limits",
        "run_as_owner(RunAsOwner) load_profile(LoadProfile) primary_unix_group(PrimaryUnixGroup) stack_size(StackSize)",
    ),
    _Row(
        False,
        "the old argument and environment syntax is read as condor_submit reads it by default; "
        "forcing it is not supported",
        "allow_arguments_v1 allow_environment_v1",
    ),
)


def _parse(row: _Row) -> list[Command]:
    commands = []
    for word in _words(row.commands):
        name, _, rest = word.partition("(")
        aliases = tuple(rest.rstrip(")").split()) if rest else ()
        commands.append(Command(name, aliases, row.honoured, row.how))
    return commands


def _words(text: str) -> list[str]:
    """``a(B C) d`` -> ``["a(B C)", "d"]``: spaces inside parentheses do not split."""
    words, depth, current = [], 0, ""
    for char in text:
        depth += (char == "(") - (char == ")")
        if char.isspace() and depth == 0:
            if current:
                words.append(current)
            current = ""
        else:
            current += char
    if current:
        words.append(current)
    return words


#: Every command, by its name.
COMMANDS: tuple[Command, ...] = tuple(command for row in _ROWS for command in _parse(row))
_BY_NAME: dict[str, Command] = {}
_PREFIXES: list[tuple[str, str, Command]] = []  # (prefix, suffix, command) for "request_<name>" and kin
for _command in COMMANDS:
    for _spelling in (_command.name, *_command.aliases):
        if "<" in _spelling:
            _prefix, _, _rest = _spelling.partition("<")
            _PREFIXES.append((_prefix.lower(), _rest.partition(">")[2].lower(), _command))
        else:
            _BY_NAME[_spelling.lower()] = _command


def lookup(name: str) -> Command | None:
    """The command ``name`` spells (case-insensitive, any of its spellings), or None for a macro."""
    key = name.strip().lower()
    if key.startswith("+"):
        key = "my." + key[1:]
    found = _BY_NAME.get(key)
    if found is not None:
        return found
    for prefix, suffix, command in _PREFIXES:
        if key.startswith(prefix) and key.endswith(suffix) and len(key) > len(prefix) + len(suffix):
            return command
    return None


def markdown_table() -> str:
    """docs/jobs.md's table: one row per group of commands, honoured or refused, and what mwpy does."""
    lines = ["| commands | under mwpy jobs |", "|---|---|"]
    for row in _ROWS:
        names = ", ".join(_spelled(command) for command in _parse(row))
        verdict = "**honoured**" if row.honoured else "**refused**"
        lines.append(f"| {names} | {verdict}: {row.how} |")
    return "\n".join(lines)


def _spelled(command: Command) -> str:
    also = f" ({', '.join(f'`{alias}`' for alias in command.aliases)})" if command.aliases else ""
    return f"`{command.name}`{also}"
