/* Score rows with a bert_ad frozen graph from C, through TensorFlow's C API.
 *
 *   score_frozen_graph EXPORT_DIR/frozen_graph.pb [OUTPUT] < ids.txt
 *
 * Each line of ids.txt holds the token ids of one row, [CLS] ... [SEP],
 * separated by spaces (the vocab is EXPORT_DIR/assets/vocab.txt). Every row
 * runs on its own (a batch of one): input_mask is all ones and segment_ids
 * all zeros (one text; for a pair, feed 1 from the second segment on).
 * Prints OUTPUT ("probabilities" by default; a [batch, n] float32 output) of
 * each row, tab-separated with 6 decimals, as test_results.tsv.
 *
 * The tensor names are those of EXPORT_DIR/frozen_graph.json: inputs
 * input_ids:0, input_mask:0, segment_ids:0 (int32 [batch, seq]); outputs
 * e.g. probabilities:0 (float32 [batch, num_labels]) and label_ids:0.
 *
 * Build against the C API of a TensorFlow 2.x pip wheel (docs/serving.md):
 *   TF=$(python -c "import tensorflow, os; print(os.path.dirname(tensorflow.__file__))")
 *   gcc -O2 -I"$TF/include" scripts/score_frozen_graph.c -o score_frozen_graph \
 *       -L"$TF" -l:libtensorflow_cc.so.2 -l:libtensorflow_framework.so.2 \
 *       -Wl,-rpath,"$TF"
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorflow/c/c_api.h"

#define MAX_TOKENS 4096

static void check(TF_Status *status, const char *what) {
  if (TF_GetCode(status) != TF_OK) {
    fprintf(stderr, "error: %s: %s\n", what, TF_Message(status));
    exit(2);
  }
}

static TF_Buffer *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "error: cannot open %s\n", path);
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *data = malloc((size_t)size);
  if (fread(data, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "error: cannot read %s\n", path);
    exit(2);
  }
  fclose(f);
  TF_Buffer *buffer = TF_NewBufferFromString(data, (size_t)size);
  free(data);
  return buffer;
}

static TF_Output operation(TF_Graph *graph, const char *name) {
  TF_Output out = {TF_GraphOperationByName(graph, name), 0};
  if (out.oper == NULL) {
    fprintf(stderr, "error: the graph has no tensor %s:0\n", name);
    exit(2);
  }
  return out;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s frozen_graph.pb [OUTPUT] < ids.txt\n", argv[0]);
    return 2;
  }
  const char *output_name = argc > 2 ? argv[2] : "probabilities";
  TF_Status *status = TF_NewStatus();
  TF_Graph *graph = TF_NewGraph();
  TF_Buffer *graph_def = read_file(argv[1]);
  TF_ImportGraphDefOptions *import = TF_NewImportGraphDefOptions();
  TF_GraphImportGraphDef(graph, graph_def, import, status);
  check(status, "import frozen_graph.pb");
  TF_DeleteImportGraphDefOptions(import);
  TF_DeleteBuffer(graph_def);

  TF_SessionOptions *options = TF_NewSessionOptions();
  TF_Session *session = TF_NewSession(graph, options, status);
  check(status, "new session");
  TF_DeleteSessionOptions(options);

  TF_Output inputs[3] = {operation(graph, "input_ids"), operation(graph, "input_mask"),
                         operation(graph, "segment_ids")};
  TF_Output output = operation(graph, output_name);

  static char line[1 << 16];
  static int32_t ids[MAX_TOKENS];
  while (fgets(line, sizeof line, stdin) != NULL) {
    int64_t n = 0;
    char *cursor = line, *end;
    for (long id = strtol(cursor, &end, 10); end != cursor && n < MAX_TOKENS;
         id = strtol(cursor, &end, 10)) {
      ids[n++] = (int32_t)id;
      cursor = end;
    }
    if (n == 0) continue;
    int64_t dims[2] = {1, n};
    size_t bytes = (size_t)n * sizeof(int32_t);
    TF_Tensor *values[3];
    for (int k = 0; k < 3; k++) {
      values[k] = TF_AllocateTensor(TF_INT32, dims, 2, bytes);
      int32_t *data = (int32_t *)TF_TensorData(values[k]);
      for (int64_t i = 0; i < n; i++) data[i] = k == 0 ? ids[i] : (k == 1 ? 1 : 0);
    }
    TF_Tensor *result = NULL;
    TF_SessionRun(session, NULL, inputs, values, 3, &output, &result, 1, NULL, 0, NULL,
                  status);
    check(status, "run");
    const float *scores = (const float *)TF_TensorData(result);
    int64_t width = TF_NumDims(result) > 1 ? TF_Dim(result, 1) : 1;
    for (int64_t j = 0; j < width; j++) printf(j ? "\t%.6f" : "%.6f", scores[j]);
    printf("\n");
    TF_DeleteTensor(result);
    for (int k = 0; k < 3; k++) TF_DeleteTensor(values[k]);
  }
  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteGraph(graph);
  TF_DeleteStatus(status);
  return 0;
}
