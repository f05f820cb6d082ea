// A tiny MPI program for the launcher tests: each rank prints its rank, world size, host name, PID
// and IPv4 addresses, after an all-reduce whose result every rank checks (so the ranks really
// talked). Compiled by the test scripts with mpicc; exits 1 when the all-reduce is wrong.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// Comma-separated IPv4 addresses of the up, non-loopback interfaces, or "none".
static void ipv4_addresses(char* out, size_t size) {
  struct ifaddrs* list = NULL;
  snprintf(out, size, "none");
  if (getifaddrs(&list) != 0) return;
  size_t used = 0;
  for (struct ifaddrs* it = list; it != NULL; it = it->ifa_next) {
    if (it->ifa_addr == NULL || it->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    const struct sockaddr_in* address = (const struct sockaddr_in*)it->ifa_addr;
    if (inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text)) == NULL) continue;
    if (strncmp(text, "127.", 4) == 0) continue;
    int n = snprintf(out + used, size - used, "%s%s", used ? "," : "", text);
    if (n < 0 || (size_t)n >= size - used) break;
    used += (size_t)n;
  }
  freeifaddrs(list);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, name_length = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Get_processor_name(host, &name_length);
  char addresses[256];
  ipv4_addresses(addresses, sizeof(addresses));

  long rank_sum = 0, mine = rank;
  MPI_Allreduce(&mine, &rank_sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  long expected = (long)size * (size - 1) / 2;

  printf("hello rank %d of %d on %s pid %d addresses %s rank_sum %ld\n", rank, size, host,
         (int)getpid(), addresses, rank_sum);
  fflush(stdout);
  MPI_Finalize();
  return rank_sum == expected ? 0 : 1;
}
