/* The korovod client as a C function table, for framework op libraries built apart from korovod
 * (TensorFlow's custom ops, built with that TensorFlow's compiler flags and C++ standard library
 * settings): they include only this header and call the one Client the korovod._client module
 * connected, so a process keeps one session with its sidecar. Plain C: no C++ type crosses it.
 *
 * Lifetimes: an op returned by submit stays valid until release(). Its completion callback runs
 * once, on the thread that completes it (korovod's completion thread, or the one closing the
 * client, which completes ops still in flight with an error); it must only hand work elsewhere.
 * The client pointer is valid until the Python session ends; callers hold their own lock around
 * submissions and are told (korovod_tf_set_client(NULL, NULL)) before it goes. */
#ifndef KOROVOD_SIDECAR_CLIENT_C_API_H_
#define KOROVOD_SIDECAR_CLIENT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KOROVOD_C_API_VERSION 2

/* Op kinds. */
enum {
  KOROVOD_ALLREDUCE = 0,
  KOROVOD_ALLGATHER = 1,
  KOROVOD_BROADCAST = 2,
  KOROVOD_ALLTOALL = 3,
  KOROVOD_REDUCESCATTER = 4,
  KOROVOD_BARRIER = 5,
  KOROVOD_JOIN = 6,
};

/* Status codes: korovod's StatusCode values (0 is OK, 1 an invalid argument, 5 internal). */
enum { KOROVOD_OK = 0, KOROVOD_INVALID_ARGUMENT = 1, KOROVOD_INTERNAL = 5 };

typedef struct KorovodOp KorovodOp;
typedef void (*KorovodDoneFn)(void* arg);

typedef struct {
  int kind;
  const char* name; /* the same on every rank; NULL or "": named by op order */
  int dtype;        /* korovod's DataType values (common/data_type.h) */
  int ndims;
  const int64_t* dims;
  const void* input; /* NULL for barrier and join */
  void* output;      /* allreduce: ndims/dims bytes (may be input); broadcast: the tensor,
                        in place (input is ignored); others: NULL, read output() */
  int reduce_op;     /* korovod's ReduceOp values */
  double prescale;
  double postscale;
  int root; /* broadcast: the root's rank in the process set */
  int process_set;
  const int64_t* splits; /* alltoall: rows to each set rank; NULL: even */
  int num_splits;
} KorovodOpSpec;

/* A tensor in device (GPU) memory as its owner exports it (client.h's DeviceTensorRef): the IPC
 * handle of the allocation it lies in (cuIpcGetMemHandle), that allocation's base address and
 * size in this process, and the tensor's offset from the base. */
typedef struct {
  unsigned char mem_handle[64];
  uint64_t allocation_base;
  uint64_t allocation_bytes;
  uint64_t offset;
} KorovodDeviceBuffer;

/* The device half of a device op; the KorovodOpSpec beside it gives the rest (its input and
 * output pointers are ignored). */
typedef struct {
  unsigned char device_uuid[16]; /* cuDeviceGetUuid: ordinals differ between processes */
  KorovodDeviceBuffer input;     /* broadcast: the tensor, in place */
  KorovodDeviceBuffer output;    /* allreduce: may be the input's */
  uint64_t output_bytes;         /* allgather, alltoall, reducescatter: the output's capacity */
  /* 64 bytes (cuIpcGetEventHandle) of an event recorded after the work that produces the input
   * and that last used the output: the collective starts once it has completed. NULL: none. */
  const unsigned char* ready_event;
} KorovodDeviceSpec;

typedef struct {
  uint32_t version; /* KOROVOD_C_API_VERSION */
  /* Returns the op, or NULL with a status code in *code and its message in err. */
  KorovodOp* (*submit)(void* client, const KorovodOpSpec* spec, int* code, char* err,
                       size_t err_len);
  /* A grouped allreduce of n tensors of one dtype (negotiated and fused together): fills ops[n],
   * or returns a status code (and err) and fills nothing. specs[0] gives the name (members are
   * <name>.<i>; none: by op order), op and scaling; the others their tensors. */
  int (*submit_grouped_allreduce)(void* client, const KorovodOpSpec* specs, int n, KorovodOp** ops,
                                  char* err, size_t err_len);
  /* fn(arg) runs once the op has completed; at once, on this thread, if it has. One per op. */
  void (*on_done)(KorovodOp* op, KorovodDoneFn fn, void* arg);
  /* After completion: the status code (0: OK) and its message. */
  int (*status)(const KorovodOp* op, char* msg, size_t msg_len);
  int (*ndims)(const KorovodOp* op);
  const int64_t* (*dims)(const KorovodOp* op);
  const void* (*output)(const KorovodOp* op, uint64_t* bytes);
  const int64_t* (*received_splits)(const KorovodOp* op, int* n);
  int (*last_joined_rank)(const KorovodOp* op);
  void (*release)(KorovodOp* op);
  int (*rank)(void* client);
  int (*size)(void* client);
  /* A device op (allreduce, broadcast, allgather, alltoall, reducescatter) on tensors that stay
   * in device memory; it completes once the result is there. As submit otherwise. */
  KorovodOp* (*submit_device)(void* client, const KorovodOpSpec* spec,
                              const KorovodDeviceSpec* device, int* code, char* err,
                              size_t err_len);
  /* The sidecar's device backend: "nccl", "host" (device memory emulated on the host, for
   * tests), "none", or "" from a sidecar that predates it. Valid while the client is. */
  const char* (*device_backend)(void* client);
  /* This process's rank in the process set and the set's size: 0, or a status code (and err). */
  int (*process_set_position)(void* client, int process_set, int* rank, int* size, char* err,
                              size_t err_len);
} KorovodClientApi;

/* The table (static storage). */
const KorovodClientApi* korovod_client_api(void);

#ifdef __cplusplus
}
#endif

#endif /* KOROVOD_SIDECAR_CLIENT_C_API_H_ */
