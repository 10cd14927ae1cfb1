# Sourced by the A/B scripts in perf/. `wait_idle_disk` returns once the disk's completed
# reads and writes and its time doing I/O (/proc/diskstats) have not moved for 3 s, at most
# after 30 s, and prints how many seconds it waited. On an ext4 mounted with `discard`,
# deleting the GBs a run wrote keeps the disk trimming into the next run.
wait_idle_disk() {
  local prev="" cur n=0 q=0
  while [ $n -lt 30 ] && [ $q -lt 3 ]; do
    cur=$(awk '$3=="vda"||$3=="sda"||$3=="nvme0n1"{print $4,$8,$15}' /proc/diskstats)
    if [ "$cur" = "$prev" ]; then q=$((q+1)); else q=0; fi
    prev=$cur; n=$((n+1)); sleep 1
  done
  echo "$n"
}
